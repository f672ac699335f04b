package store

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// partitioned describes one time-partitioned table: what its partitions
// are keyed by and how an instant becomes a bound of that key.
type partitioned struct {
	name string
	// key is the partition key column.
	key string
	// idPrefix is the id prefix of a table keyed by ULID ("msg", "dlv");
	// empty for one keyed by a timestamp.
	idPrefix string
	// with holds the storage parameters of each partition.
	with string
}

// Partitioned tables in the order a retired interval is dropped: the
// deliveries before their messages, the payloads with them.
var partitionedTables = []partitioned{
	{name: "delivery_attempts", key: "attempted_at"},
	{name: "deliveries", key: "id", idPrefix: "dlv",
		with: " WITH (autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_insert_scale_factor = 0.05)"},
	{name: "message_payloads", key: "message_id", idPrefix: "msg"},
	{name: "messages", key: "id", idPrefix: "msg"},
}

func partitionedTable(name string) (partitioned, bool) {
	for _, p := range partitionedTables {
		if p.name == name {
			return p, true
		}
	}
	return partitioned{}, false
}

// bound renders instant t as a bound of the table's key.
func (p partitioned) bound(t time.Time) any {
	if p.idPrefix == "" {
		return t
	}
	return IDBound(p.idPrefix, t)
}

// boundLiteral renders t as an SQL literal of the key (bounds of DDL cannot
// be parameters). Both forms hold only [0-9A-Z_:.+-T] characters.
func (p partitioned) boundLiteral(t time.Time) string {
	if p.idPrefix == "" {
		return "'" + t.UTC().Format("2006-01-02T15:04:05.000Z07:00") + "'"
	}
	return "'" + IDBound(p.idPrefix, t) + "'"
}

// keyTime is the instant a key of the table stands for.
func (p partitioned) keyTime(key any) (time.Time, bool) {
	switch k := key.(type) {
	case time.Time:
		return k, true
	case string:
		if !strings.HasPrefix(k, p.idPrefix+"_") {
			return time.Time{}, false
		}
		return IDTime(k)
	}
	return time.Time{}, false
}

// encodeTime is the 10-character time part of a ULID minted at t.
func encodeTime(t time.Time) string {
	ms := uint64(t.UnixMilli())
	var out [10]byte
	for i := range out {
		out[i] = crockford[(ms>>(45-5*uint(i)))&31]
	}
	return string(out[:])
}

// IDBound is the smallest id with prefix minted at or after t: the bound
// of a partition of a table keyed by ULID.
func IDBound(prefix string, t time.Time) string {
	return prefix + "_" + encodeTime(t) + "0000000000000000"
}

// IDTime returns when a prefixed ULID was minted (to the millisecond).
func IDTime(id string) (time.Time, bool) {
	_, rest, ok := strings.Cut(id, "_")
	if !ok || len(rest) < 10 {
		return time.Time{}, false
	}
	var ms uint64
	for i := range 10 {
		v := strings.IndexByte(crockford, rest[i])
		if v < 0 {
			return time.Time{}, false
		}
		ms = ms<<5 | uint64(v)
	}
	return time.UnixMilli(int64(ms)).UTC(), true
}

// DeliveryID is the id of message messageID's delivery to endpoint
// endpointID: the message's time (its ULID's first ten characters), so a
// delivery always shares its message's partition, then 80 bits of a hash
// of the pair. A message has one delivery per endpoint, so the id is
// unique, and a message job (which names its endpoints) knows its
// deliveries' ids without carrying them or reading them.
func DeliveryID(messageID, endpointID string) string {
	_, rest, _ := strings.Cut(messageID, "_")
	if len(rest) < 10 {
		rest += strings.Repeat("0", 10-len(rest))
	}
	sum := sha256.Sum256([]byte(messageID + "\x00" + endpointID))
	// 80 bits as 16 base32 characters.
	var chars [16]byte
	var acc uint64
	bits := 0
	j := 0
	for _, x := range sum[:10] {
		acc = acc<<8 | uint64(x)
		bits += 8
		for bits >= 5 {
			bits -= 5
			chars[j] = crockford[(acc>>uint(bits))&31]
			j++
		}
	}
	return "dlv_" + rest[:10] + string(chars[:])
}

// idRange returns the bounds [lo, hi) of the ids with prefix minted from
// id's time to width after it.
func idRange(prefix, id string, width time.Duration) (lo, hi string, ok bool) {
	t, ok := IDTime(id)
	if !ok {
		return "", "", false
	}
	return IDBound(prefix, t), IDBound(prefix, t.Add(width)), true
}

// floorTime aligns t down to a multiple of interval since the epoch.
func floorTime(t time.Time, interval time.Duration) time.Time {
	ms, w := t.UnixMilli(), interval.Milliseconds()
	return time.UnixMilli(ms - ((ms%w)+w)%w).UTC()
}

// Partition is one partition of a time-partitioned table: it holds the
// rows of [From, To) (From zero: every key before To).
type Partition struct {
	Name   string
	Parent string
	From   time.Time
	To     time.Time
}

// Partitions lists the partitions the maintainer manages, by table and
// time.
func (s *Store) Partitions(ctx context.Context) ([]Partition, error) {
	rows, err := s.pool.Query(ctx, `SELECT name, parent, from_at, to_at FROM hookd_partitions ORDER BY parent, to_at`)
	if err != nil {
		return nil, fmt.Errorf("list partitions: %w", err)
	}
	defer rows.Close()
	var out []Partition
	for rows.Next() {
		var p Partition
		var from *time.Time
		if err := rows.Scan(&p.Name, &p.Parent, &from, &p.To); err != nil {
			return nil, fmt.Errorf("list partitions: %w", err)
		}
		if from != nil {
			p.From = from.UTC()
		}
		p.To = p.To.UTC()
		out = append(out, p)
	}
	return out, rows.Err()
}

// maintenanceLockTimeout bounds how long a partition DDL statement waits
// for its lock: while it waits, every statement on the table queues behind
// it, so it gives up quickly, lets the queue drain, and tries again (up to
// dropAttempts times for a drop; then the next maintenance run does).
const maintenanceLockTimeout = "100ms"

// dropAttempts is how many times a drop asks for its lock in one run, a
// pause of dropPause between tries.
const (
	dropAttempts = 10
	dropPause    = 200 * time.Millisecond
)

// isLockTimeout reports whether err is Postgres's lock_timeout.
func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}

// ErrLockTimeout wraps a maintenance step that gave up waiting for a lock.
var ErrLockTimeout = errors.New("lock timeout")

// ddl runs fn in a transaction whose statements wait at most
// maintenanceLockTimeout for a lock.
func (s *Store) ddl(ctx context.Context, fn func(pgx.Tx) error) error {
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '`+maintenanceLockTimeout+`'`); err != nil {
			return err
		}
		return fn(tx)
	})
	if isLockTimeout(err) {
		return fmt.Errorf("%w: %w", ErrLockTimeout, err)
	}
	return err
}

// createPartition creates and attaches the partition of [from, to) of
// table t, first moving any row of that range out of the default
// partition (a partition cannot be attached while the default holds rows
// of its range), all in one transaction. It returns the rows moved.
//
// A live range (one rows are being written to now, which then go to the
// default partition) is created with the table locked against readers and
// writers (ACCESS EXCLUSIVE) for the few milliseconds it takes: a writer that
// had routed its row to the default partition before the attach would
// otherwise fail on the default's new constraint, an update of a row being
// moved would miss it, and a reader that had looked up the table's
// partitions before the attach but took its snapshot after the move would
// find the row in neither place. A range ahead of every writer needs no lock
// beyond ATTACH's own, so steady state never blocks a read or a write.
func (s *Store) createPartition(ctx context.Context, t partitioned, from, to time.Time, live bool) (PartitionChange, error) {
	name := fmt.Sprintf("%s_p%s", t.name, from.UTC().Format("20060102t150405"))
	var moved int64
	err := s.ddl(ctx, func(tx pgx.Tx) error {
		if !live {
			// Rows of the range in the default make it live after all.
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+t.name+`_default WHERE `+t.key+` >= $1 AND `+t.key+` < $2)`,
				t.bound(from), t.bound(to)).Scan(&live); err != nil {
				return fmt.Errorf("look at the default partition: %w", err)
			}
		}
		if live {
			if _, err := tx.Exec(ctx, `LOCK TABLE `+t.name+` IN ACCESS EXCLUSIVE MODE`); err != nil {
				return fmt.Errorf("lock %s: %w", t.name, err)
			}
		}
		if _, err := tx.Exec(ctx, `CREATE TEMP TABLE hookd_moved (LIKE `+t.name+`) ON COMMIT DROP`); err != nil {
			return fmt.Errorf("create move table: %w", err)
		}
		tag, err := tx.Exec(ctx, `
			WITH m AS (DELETE FROM `+t.name+`_default WHERE `+t.key+` >= $1 AND `+t.key+` < $2 RETURNING *)
			INSERT INTO hookd_moved SELECT * FROM m`, pgx.QueryExecModeSimpleProtocol, t.bound(from), t.bound(to))
		if err != nil {
			return fmt.Errorf("move rows out of the default partition: %w", err)
		}
		moved = tag.RowsAffected()
		if _, err := tx.Exec(ctx, `CREATE TABLE `+name+` (LIKE `+t.name+` INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`+t.with); err != nil {
			return fmt.Errorf("create partition: %w", err)
		}
		if _, err := tx.Exec(ctx, `ALTER TABLE `+t.name+` ATTACH PARTITION `+name+
			` FOR VALUES FROM (`+t.boundLiteral(from)+`) TO (`+t.boundLiteral(to)+`)`); err != nil {
			return fmt.Errorf("attach partition: %w", err)
		}
		if moved > 0 {
			if _, err := tx.Exec(ctx, `INSERT INTO `+t.name+` OVERRIDING SYSTEM VALUE SELECT * FROM hookd_moved`, pgx.QueryExecModeSimpleProtocol); err != nil {
				return fmt.Errorf("move rows into the partition: %w", err)
			}
		}
		_, err = tx.Exec(ctx, `INSERT INTO hookd_partitions (name, parent, from_at, to_at) VALUES ($1, $2, $3, $4)`, name, t.name, from, to)
		return err
	})
	if err != nil {
		return PartitionChange{}, fmt.Errorf("partition %s: %w", name, err)
	}
	return PartitionChange{Partition: Partition{Name: name, Parent: t.name, From: from, To: to}, Moved: moved}, nil
}

// liveMargin is how far ahead of the maintainer's "now" a range may
// already receive rows (other processes' clocks ahead of the database's).
const liveMargin = time.Minute

// PartitionChange is one partition the maintainer created or dropped.
type PartitionChange struct {
	Partition
	// Moved counts the rows moved out of the default partition into it.
	Moved int64
	// Adopted is set for a default partition that became this partition
	// with its rows (adoptDefault).
	Adopted bool
	// Expired are the deliveries a drop made expired: unfinished when it
	// held the partition.
	Expired []ExpiredDelivery
}

// catchUpRows is the most rows a default partition may hold for the
// partitions of the interval being written to be created by moving them
// under the table's ACCESS EXCLUSIVE lock (createPartition, live). Moving
// rows costs about 0.05 ms a row under that lock on a loaded 2-core
// machine (5,000 deliveries took 280 ms, 20,000 took 1.4 s), so 1,000
// stay well within a quarter of a second; a default partition holding
// more (no maintainer ran for longer than the partitions made ahead)
// becomes a partition itself (adoptDefault), moving nothing.
const catchUpRows = 1000

// catchUpLead is how far past now, beyond liveMargin, an adopted default
// partition's range reaches (then rounded up to an interval's end): no
// writer's row may reach its end before the swap, since rows past it are
// refused by the default's constraint until then.
const catchUpLead = time.Minute

// EnsurePartitions creates every table's partitions from one interval
// before the one holding now up to ahead intervals past it, each interval
// aligned to the epoch, filling only what no partition covers (rows older
// than that in the default partition are DrainDefault's). When the
// interval being written to has no partition and the default partition
// holds more rows than can be moved at once (the maintainer was stopped
// longer than the partitions made ahead), the default partition becomes
// the partition of everything from the last partition's end to an interval
// boundary past now (adoptDefault), and the rest follows. A table whose
// creation fails is left for the next run; the others go on, and the
// errors are returned together.
func (s *Store) EnsurePartitions(ctx context.Context, now time.Time, interval time.Duration, ahead int) ([]PartitionChange, error) {
	existing, err := s.Partitions(ctx)
	if err != nil {
		return nil, err
	}
	var (
		out  []PartitionChange
		errs []error
	)
	want := floorTime(now, interval).Add(time.Duration(ahead+1) * interval)
	for _, t := range partitionedTables {
		var parts []Partition
		for _, p := range existing {
			if p.Parent == t.name {
				parts = append(parts, p)
			}
		}
		changes, err := s.ensureTable(ctx, t, parts, now, interval, want)
		out = append(out, changes...)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", t.name, err))
			if ctx.Err() != nil {
				break
			}
		}
	}
	return out, errors.Join(errs...)
}

// covering returns the partition of parts holding instant at.
func covering(parts []Partition, at time.Time) (Partition, bool) {
	for _, p := range parts {
		if (p.From.IsZero() || !p.From.After(at)) && p.To.After(at) {
			return p, true
		}
	}
	return Partition{}, false
}

// ensureTable is EnsurePartitions for table t with partitions parts.
func (s *Store) ensureTable(ctx context.Context, t partitioned, parts []Partition, now time.Time, interval time.Duration, want time.Time) ([]PartitionChange, error) {
	var out []PartitionChange
	if _, ok := covering(parts, now); !ok {
		n, err := s.defaultRowsUpTo(ctx, t, catchUpRows+1)
		if err != nil {
			return out, err
		}
		if n > catchUpRows {
			// The range [lo, hi) the default becomes: from the end of the
			// last partition before now (or every key before hi) to an
			// interval boundary past every writer's clock, or the next
			// partition's start when that comes first.
			var lo time.Time
			hi := floorTime(now.Add(liveMargin+catchUpLead), interval).Add(interval)
			for _, p := range parts {
				if !p.To.After(now) && p.To.After(lo) {
					lo = p.To
				}
				if !p.From.IsZero() && p.From.After(now) && p.From.Before(hi) {
					hi = p.From
				}
			}
			changes, err := s.adoptDefault(ctx, t, lo, hi, interval, parts, now)
			out = append(out, changes...)
			for _, c := range changes {
				parts = append(parts, c.Partition)
			}
			if err != nil {
				// Partitions ahead would each scan the full default
				// partition under its lock: they wait for the next run.
				return out, err
			}
		}
	}
	cursor := floorTime(now, interval).Add(-interval)
	for cursor.Before(want) {
		if p, ok := covering(parts, cursor); ok {
			cursor = p.To
			continue
		}
		next := floorTime(cursor, interval).Add(interval)
		for _, p := range parts {
			if !p.From.IsZero() && p.From.After(cursor) && p.From.Before(next) {
				next = p.From
			}
		}
		// Clocks of other processes may run a little ahead: a range
		// starting within a minute of now may be written to already.
		c, err := s.createPartitionRetrying(ctx, t, cursor, next, cursor.Before(now.Add(liveMargin)))
		if err != nil {
			return out, err
		}
		out = append(out, c)
		parts = append(parts, c.Partition)
		cursor = next
	}
	return out, nil
}

// createPartitionRetrying is createPartition retried like a drop when it
// times out on its lock.
func (s *Store) createPartitionRetrying(ctx context.Context, t partitioned, from, to time.Time, live bool) (PartitionChange, error) {
	var c PartitionChange
	err := s.retryLockTimeout(ctx, func() error {
		var err error
		c, err = s.createPartition(ctx, t, from, to, live)
		return err
	})
	return c, err
}

// defaultRowsUpTo counts the rows of t's default partition, reading at
// most limit.
func (s *Store) defaultRowsUpTo(ctx context.Context, t partitioned, limit int) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM `+t.name+`_default LIMIT $1) x`, limit).Scan(&n); err != nil {
		return 0, fmt.Errorf("count default rows of %s: %w", t.name, err)
	}
	return n, nil
}

// maxStrays bounds the partitions adoptDefault creates for rows outside
// the range it adopts.
const maxStrays = 100

// adoptDefault makes t's default partition the partition of [lo, hi) (lo
// zero: every key before hi) and gives t a new, empty default partition,
// moving no row. now is the maintainer's time, on the database clock.
//
// The default partition can become that partition only if it holds no
// row outside [lo, hi): the few that do (written by a clock far ahead or
// behind) first get partitions of their own intervals, as DrainDefault
// makes them. Then a CHECK constraint of the range is added NOT VALID (the
// default's ACCESS EXCLUSIVE lock for the catalog change) and validated
// (a scan under SHARE UPDATE EXCLUSIVE, which readers and writers do not
// wait for), the new default is created with its indexes (not yet a
// partition), and one short transaction of catalog changes detaches the
// default, attaches it for [lo, hi) (the constraint proves its rows belong
// there, so PostgreSQL skips the scan) and attaches the new, empty one as
// the default. Every lock is asked for with maintenanceLockTimeout and
// retried.
//
// While the constraint is there, a row at or past hi written to the
// default is refused: hi is at least liveMargin+catchUpLead past now, and
// if the database's clock is within liveMargin of hi before the swap, the
// constraint is dropped and the adoption left to the next run.
func (s *Store) adoptDefault(ctx context.Context, t partitioned, lo, hi time.Time, interval time.Duration, parts []Partition, now time.Time) ([]PartitionChange, error) {
	var out []PartitionChange
	def := t.name + "_default"
	inRange := t.key + ` < ` + t.boundLiteral(hi)
	if !lo.IsZero() {
		inRange = t.key + ` >= ` + t.boundLiteral(lo) + ` AND ` + inRange
	}
	for range maxStrays {
		var key any
		err := s.pool.QueryRow(ctx, `SELECT `+t.key+` FROM `+def+` WHERE NOT (`+inRange+`) ORDER BY 1 LIMIT 1`).Scan(&key)
		if errors.Is(err, pgx.ErrNoRows) {
			break
		}
		if err != nil {
			return out, fmt.Errorf("read default partition: %w", err)
		}
		at, ok := t.keyTime(key)
		if !ok {
			return out, fmt.Errorf("adopt default partition: it holds a row whose key names no time (%v)", key)
		}
		from, to, err := gapRange(t, parts, at, interval)
		if err != nil {
			return out, err
		}
		c, err := s.createPartitionRetrying(ctx, t, from, to, true)
		if err != nil {
			return out, err
		}
		out = append(out, c)
		parts = append(parts, c.Partition)
	}

	started, err := s.dbClock(ctx)
	if err != nil {
		return out, err
	}
	const check = "hookd_adopt_check"
	dropCheck := func() {
		bg := context.WithoutCancel(ctx)
		_ = s.retryLockTimeout(bg, func() error {
			return s.ddl(bg, func(tx pgx.Tx) error {
				_, err := tx.Exec(bg, `ALTER TABLE `+def+` DROP CONSTRAINT IF EXISTS `+check)
				return err
			})
		})
	}
	err = s.retryLockTimeout(ctx, func() error {
		return s.ddl(ctx, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `ALTER TABLE `+def+` DROP CONSTRAINT IF EXISTS `+check+`, ADD CONSTRAINT `+check+` CHECK (`+inRange+`) NOT VALID`)
			return err
		})
	})
	if err != nil {
		return out, fmt.Errorf("constrain default partition: %w", err)
	}
	err = s.retryLockTimeout(ctx, func() error {
		return s.ddl(ctx, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `ALTER TABLE `+def+` VALIDATE CONSTRAINT `+check)
			return err
		})
	})
	if err != nil {
		dropCheck()
		return out, fmt.Errorf("validate default partition's range: %w", err)
	}
	name := fmt.Sprintf("%s_p%s", t.name, lo.UTC().Format("20060102t150405"))
	from := "MINVALUE"
	var fromAt *time.Time
	if lo.IsZero() {
		name = fmt.Sprintf("%s_until%s", t.name, hi.UTC().Format("20060102t150405"))
	} else {
		from, fromAt = t.boundLiteral(lo), &lo
	}
	// The new default partition, its indexes built beforehand: the swap
	// then only changes the catalog.
	next := t.name + "_default_next"
	if _, err := s.pool.Exec(ctx, `DROP TABLE IF EXISTS `+next+`; CREATE TABLE `+next+
		` (LIKE `+t.name+` INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING INDEXES)`+t.with); err != nil {
		dropCheck()
		return out, fmt.Errorf("create the next default partition: %w", err)
	}
	err = s.retryLockTimeout(ctx, func() error {
		at, err := s.dbClock(ctx)
		if err != nil {
			return err
		}
		if !now.Add(at.Sub(started)).Add(liveMargin).Before(hi) {
			return fmt.Errorf("adopt default partition: writers' clocks may reach %s, its range's end, before it is attached", hi.Format(time.RFC3339))
		}
		return s.ddl(ctx, func(tx pgx.Tx) error {
			for _, q := range []string{
				`ALTER TABLE ` + t.name + ` DETACH PARTITION ` + def,
				`ALTER TABLE ` + def + ` RENAME TO ` + name,
				// With no default partition, nothing is scanned for the
				// range, and the constraint spares the scan of its rows.
				`ALTER TABLE ` + t.name + ` ATTACH PARTITION ` + name + ` FOR VALUES FROM (` + from + `) TO (` + t.boundLiteral(hi) + `)`,
				`ALTER TABLE ` + next + ` RENAME TO ` + def,
				`ALTER TABLE ` + t.name + ` ATTACH PARTITION ` + def + ` DEFAULT`,
				`ALTER TABLE ` + name + ` DROP CONSTRAINT ` + check,
			} {
				if _, err := tx.Exec(ctx, q); err != nil {
					return fmt.Errorf("swap default partition: %w", err)
				}
			}
			_, err := tx.Exec(ctx, `INSERT INTO hookd_partitions (name, parent, from_at, to_at) VALUES ($1, $2, $3, $4)`, name, t.name, fromAt, hi)
			return err
		})
	})
	if err != nil {
		dropCheck()
		_, _ = s.pool.Exec(context.WithoutCancel(ctx), `DROP TABLE IF EXISTS `+next)
		return out, fmt.Errorf("adopt default partition: %w", err)
	}
	return append(out, PartitionChange{Partition: Partition{Name: name, Parent: t.name, From: lo, To: hi}, Adopted: true}), nil
}

// dbClock reads the database's clock.
func (s *Store) dbClock(ctx context.Context) (time.Time, error) {
	var at time.Time
	if err := s.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&at); err != nil {
		return time.Time{}, fmt.Errorf("read the database clock: %w", err)
	}
	return at, nil
}

// gapRange returns the range of the partition to create for a default
// partition's row at instant at: its interval, cut to the gap between the
// partitions of parts around it.
func gapRange(t partitioned, parts []Partition, at time.Time, interval time.Duration) (from, to time.Time, err error) {
	from, to = floorTime(at, interval), floorTime(at, interval).Add(interval)
	for _, p := range parts {
		if !p.To.After(at) && p.To.After(from) {
			from = p.To
		}
		if !p.From.IsZero() && p.From.After(at) && p.From.Before(to) {
			to = p.From
		}
		if (p.From.IsZero() || !p.From.After(at)) && p.To.After(at) {
			return from, to, fmt.Errorf("drain default partition of %s: %v belongs to partition %s", t.name, at, p.Name)
		}
	}
	return from, to, nil
}

// DefaultRows counts the rows each table's default partition holds: rows
// whose interval had no partition when they were written.
func (s *Store) DefaultRows(ctx context.Context) (map[string]int64, error) {
	out := make(map[string]int64, len(partitionedTables))
	for _, t := range partitionedTables {
		var n int64
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM `+t.name+`_default`).Scan(&n); err != nil {
			return nil, fmt.Errorf("count default rows of %s: %w", t.name, err)
		}
		out[t.name] = n
	}
	return out, nil
}

// DrainDefault moves the rows of every default partition into partitions of
// their intervals, creating each (at most limit in all), oldest first. A
// partition made for a gap between existing partitions covers only the
// gap. Rows whose key names no time (not a ULID) stay where they are, and
// so does a default partition holding more than catchUpRows rows: moving
// them would hold the table's lock too long (EnsurePartitions adopts it
// when its rows are the interval being written's). A table that fails is
// left for the next run; the others go on.
func (s *Store) DrainDefault(ctx context.Context, interval time.Duration, limit int) ([]PartitionChange, error) {
	var (
		out  []PartitionChange
		errs []error
	)
	for _, t := range partitionedTables {
		n, err := s.defaultRowsUpTo(ctx, t, catchUpRows+1)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if n > catchUpRows {
			continue
		}
		for len(out) < limit {
			var key any
			err := s.pool.QueryRow(ctx, `SELECT `+t.key+` FROM `+t.name+`_default ORDER BY 1 LIMIT 1`).Scan(&key)
			if errors.Is(err, pgx.ErrNoRows) {
				break
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("read default partition of %s: %w", t.name, err))
				break
			}
			at, ok := t.keyTime(key)
			if !ok {
				break
			}
			existing, err := s.Partitions(ctx)
			if err != nil {
				return out, err
			}
			var parts []Partition
			for _, p := range existing {
				if p.Parent == t.name {
					parts = append(parts, p)
				}
			}
			from, to, err := gapRange(t, parts, at, interval)
			if err != nil {
				errs = append(errs, err)
				break
			}
			c, err := s.createPartitionRetrying(ctx, t, from, to, true)
			if err != nil {
				errs = append(errs, err)
				break
			}
			out = append(out, c)
		}
	}
	return out, errors.Join(errs...)
}

// ExpiredDelivery is a delivery retention made final.
type ExpiredDelivery struct {
	ID         string
	MessageID  string
	EndpointID string
	TenantID   string
	Attempts   int
	// Was is the status it had.
	Was string
	// At is when it was made expired (the database's time).
	At time.Time
}

// expireDeliveriesSQL expires up to $3 unfinished deliveries with ids
// before $1 ($2: their last_error).
const expireDeliveriesSQL = `
		WITH x AS (
			SELECT id, status FROM deliveries
			WHERE status IN ('pending', 'waiting', 'held') AND id < $1
			ORDER BY id LIMIT $3
			FOR UPDATE SKIP LOCKED
		), u AS (
			UPDATE deliveries d SET status = 'expired', last_error = $2, next_attempt_at = NULL,
				breaker_open_until = NULL, updated_at = now()
			FROM x WHERE d.id = x.id AND d.status IN ('pending', 'waiting', 'held') AND d.id < $1
			RETURNING d.id, d.message_id, d.endpoint_id, d.tenant_id, d.attempt_count, d.job_id, x.status AS was, d.updated_at
		), c AS (
			UPDATE river_job j SET state = 'cancelled', finalized_at = now()
			FROM u WHERE j.id = u.job_id AND j.state IN ('available', 'scheduled', 'retryable', 'pending')
			RETURNING j.id
		)
		SELECT id, message_id, endpoint_id, tenant_id, attempt_count, was, updated_at, (SELECT count(*) FROM c) FROM u ORDER BY id`

// expirePartitionSQL expires every unfinished delivery of a detached
// deliveries partition ($1: their last_error), which nothing else can
// lock while the detach holds it, and cancels their River jobs that have
// not started.
func expirePartitionSQL(partition string) string {
	return `
		WITH u AS (
			UPDATE ` + partition + ` d SET status = 'expired', last_error = $1, next_attempt_at = NULL,
				breaker_open_until = NULL, updated_at = now()
			FROM (SELECT id, status FROM ` + partition + ` WHERE status IN ('pending', 'waiting', 'held')) x
			WHERE d.id = x.id
			RETURNING d.id, d.message_id, d.endpoint_id, d.tenant_id, d.attempt_count, d.job_id, x.status AS was, d.updated_at
		), c AS (
			UPDATE river_job j SET state = 'cancelled', finalized_at = now()
			FROM u WHERE j.id = u.job_id AND j.state IN ('available', 'scheduled', 'retryable', 'pending')
			RETURNING j.id
		)
		SELECT id, message_id, endpoint_id, tenant_id, attempt_count, was, updated_at, (SELECT count(*) FROM c) FROM u ORDER BY id`
}

// expire runs an expiry statement in tx and emits a delivery.failed
// operational event for each delivery it made expired.
func (s *Store) expire(ctx context.Context, tx pgx.Tx, sql, lastError string, args ...any) ([]ExpiredDelivery, error) {
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	var out []ExpiredDelivery
	for rows.Next() {
		var d ExpiredDelivery
		if err := rows.Scan(&d.ID, &d.MessageID, &d.EndpointID, &d.TenantID, &d.Attempts, &d.Was, &d.At, new(int64)); err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, d)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	events := make([]OperationalEvent, len(out))
	for i, d := range out {
		events[i] = deliveryFailedEvent(d.At, d.EndpointID, d.TenantID, d.ID, d.MessageID, d.Attempts, &lastError, DeliveryExpired)
	}
	if err := s.emitOperational(ctx, tx, events); err != nil {
		return nil, err
	}
	return out, nil
}

// ExpireDeliveries makes final (expired, with lastError) up to limit of
// the deliveries created before cutoff that are not final yet (pending,
// waiting, held), cancels their River jobs that have not started and
// emits their delivery.failed operational events, in one transaction. A
// job already running finds its delivery expired: the ledger never
// changes an expired delivery. A delivery another transaction has locked
// is left for the next call (or for the drop of its partition, which
// expires what is left). deliveries_unfinished_idx finds them in the
// partitions before cutoff without reading their other rows.
func (s *Store) ExpireDeliveries(ctx context.Context, cutoff time.Time, lastError string, limit int) ([]ExpiredDelivery, error) {
	var out []ExpiredDelivery
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		out, err = s.expire(ctx, tx, expireDeliveriesSQL, lastError, customPlan, IDBound("dlv", cutoff), lastError, limit)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("expire deliveries: %w", err)
	}
	return out, nil
}

// maxExpiredAtDrop bounds the unfinished deliveries a partition's drop
// makes expired while it holds the table's lock (a fraction of a
// millisecond each, with their events); a partition holding more is left
// for the next run, whose expiry pass takes them first.
const maxExpiredAtDrop = 100

// ErrUnfinishedDeliveries is a deliveries partition kept for the next run
// because it held more unfinished deliveries than its drop expires.
var ErrUnfinishedDeliveries = errors.New("unfinished deliveries")

// RetirePartitions drops the partitions whose whole interval ends at or
// before cutoff (payloads: payloadCutoff), oldest first. Before a
// deliveries partition goes, the attempts its deliveries made later (in
// attempt partitions that stay) are deleted, so no attempt outlives its
// delivery. Each drop is a DETACH and a DROP in one short transaction
// (DETACH ... CONCURRENTLY is refused while a default partition exists);
// a drop that cannot get its lock quickly is retried, then left to the
// next run.
//
// Callers expire the non-final deliveries before cutoff first, but a row
// that was locked then (a ledger update parking or holding it, a retry)
// may have committed unfinished since. Once the detach holds the
// partition no one else can change its rows, so any delivery still
// unfinished is made expired there (lastError, its job cancelled, its
// event emitted: returned in the change's Expired) before the drop, or,
// when there are more than maxExpiredAtDrop, the partition stays for the
// next run. A partition that stays keeps the messages and payloads
// partitions of its interval too; the others are dropped, and the errors
// are returned together.
func (s *Store) RetirePartitions(ctx context.Context, cutoff, payloadCutoff time.Time, lastError string) ([]PartitionChange, error) {
	existing, err := s.Partitions(ctx)
	if err != nil {
		return nil, err
	}
	var (
		out  []PartitionChange
		errs []error
		kept []Partition // deliveries partitions that failed to go
	)
	for _, t := range partitionedTables {
		limit := cutoff
		if t.name == "message_payloads" {
			limit = payloadCutoff
		}
		for _, p := range existing {
			if p.Parent != t.name || p.To.After(limit) {
				continue
			}
			if t.idPrefix == "msg" && slices.ContainsFunc(kept, p.overlaps) {
				// A message must not go before its deliveries.
				continue
			}
			var expired []ExpiredDelivery
			err := s.retryLockTimeout(ctx, func() error {
				return s.ddl(ctx, func(tx pgx.Tx) error {
					expired = nil
					if t.name == "deliveries" {
						// Attempts are made after their delivery's id was
						// minted, give or take the clocks' skew.
						lo := "dlv_"
						after := time.Time{}
						if !p.From.IsZero() {
							lo = IDBound("dlv", p.From)
							after = p.From.Add(-liveMargin)
						}
						if _, err := tx.Exec(ctx, `DELETE FROM delivery_attempts WHERE attempted_at >= $1 AND delivery_id >= $2 AND delivery_id < $3`,
							after, lo, IDBound("dlv", p.To)); err != nil {
							return fmt.Errorf("delete later attempts: %w", err)
						}
					}
					if _, err := tx.Exec(ctx, `ALTER TABLE `+t.name+` DETACH PARTITION `+p.Name); err != nil {
						return fmt.Errorf("detach: %w", err)
					}
					if t.name == "deliveries" {
						var unfinished int
						if err := tx.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM `+p.Name+
							` WHERE status IN ('pending', 'waiting', 'held') LIMIT $1) x`, maxExpiredAtDrop+1).Scan(&unfinished); err != nil {
							return fmt.Errorf("count unfinished deliveries: %w", err)
						}
						if unfinished > maxExpiredAtDrop {
							return fmt.Errorf("%w: more than %d left: kept for the next run", ErrUnfinishedDeliveries, maxExpiredAtDrop)
						}
						if unfinished > 0 {
							var err error
							if expired, err = s.expire(ctx, tx, expirePartitionSQL(p.Name), lastError, lastError); err != nil {
								return fmt.Errorf("expire unfinished deliveries: %w", err)
							}
						}
					}
					if _, err := tx.Exec(ctx, `DROP TABLE `+p.Name); err != nil {
						return fmt.Errorf("drop: %w", err)
					}
					_, err := tx.Exec(ctx, `DELETE FROM hookd_partitions WHERE name = $1`, p.Name)
					return err
				})
			})
			if err != nil {
				errs = append(errs, fmt.Errorf("retire partition %s: %w", p.Name, err))
				if t.name == "deliveries" {
					kept = append(kept, p)
				}
				if ctx.Err() != nil {
					return out, errors.Join(errs...)
				}
				continue
			}
			out = append(out, PartitionChange{Partition: p, Expired: expired})
		}
	}
	return out, errors.Join(errs...)
}

// overlaps reports whether p and q share any instant.
func (p Partition) overlaps(q Partition) bool {
	return (p.From.IsZero() || q.To.After(p.From)) && (q.From.IsZero() || p.To.After(q.From))
}

// retryLockTimeout runs fn until it does not fail for a lock timeout, at
// most dropAttempts times, pausing between tries so the statements that
// queued behind the last try can run.
func (s *Store) retryLockTimeout(ctx context.Context, fn func() error) error {
	var err error
	for range dropAttempts {
		if err = fn(); !errors.Is(err, ErrLockTimeout) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(dropPause):
		}
	}
	return err
}

// deleteBatches runs a DELETE of at most batch rows ($1: the cutoff, $2:
// the batch) until one deletes fewer, each batch its own short
// transaction, and returns the rows deleted.
func (s *Store) deleteBatches(ctx context.Context, sql string, cutoff time.Time, batch int) (int64, error) {
	var total int64
	for {
		tag, err := s.pool.Exec(ctx, sql, cutoff, batch)
		if err != nil {
			return total, err
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(batch) {
			return total, nil
		}
		if err := ctx.Err(); err != nil {
			return total, err
		}
	}
}

// ExpireIdempotencyKeys deletes the idempotency keys claimed before
// cutoff, batch rows at a time.
func (s *Store) ExpireIdempotencyKeys(ctx context.Context, cutoff time.Time, batch int) (int64, error) {
	n, err := s.deleteBatches(ctx, `
		DELETE FROM idempotency_keys WHERE ctid IN (
			SELECT ctid FROM idempotency_keys WHERE created_at < $1 LIMIT $2)`, cutoff, batch)
	if err != nil {
		return n, fmt.Errorf("expire idempotency keys: %w", err)
	}
	return n, nil
}

// PruneHistory deletes the breaker transitions, endpoint events and class
// changes recorded before cutoff, batch rows at a time, and returns how
// many it deleted.
func (s *Store) PruneHistory(ctx context.Context, cutoff time.Time, batch int) (int64, error) {
	var total int64
	for _, table := range []string{"breaker_transitions", "endpoint_events", "class_changes"} {
		n, err := s.deleteBatches(ctx, `
			DELETE FROM `+table+` WHERE id IN (
				SELECT id FROM `+table+` WHERE at < $1 ORDER BY at LIMIT $2)`, cutoff, batch)
		total += n
		if err != nil {
			return total, fmt.Errorf("prune %s: %w", table, err)
		}
	}
	return total, nil
}

// MaintenanceLockKey is the advisory lock of the one process that
// maintains partitions at a time.
const MaintenanceLockKey = 0x686f6f6b646d // "hookdm"

// WithMaintenanceLock runs fn while this process holds the maintenance
// lock, and reports false without running it when another process holds
// it. The lock is a session lock on a connection held for fn's duration.
func (s *Store) WithMaintenanceLock(ctx context.Context, fn func(context.Context) error) (bool, error) {
	conn, err := s.lockPool().Acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("acquire connection: %w", err)
	}
	defer conn.Release()
	var got bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, int64(MaintenanceLockKey)).Scan(&got); err != nil {
		return false, fmt.Errorf("take maintenance lock: %w", err)
	}
	if !got {
		return false, nil
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, int64(MaintenanceLockKey))
	}()
	return true, fn(ctx)
}
