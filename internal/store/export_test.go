package store

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// MigrateTo applies the migrations up to version, for upgrade tests.
func MigrateTo(ctx context.Context, pool *pgxpool.Pool, version int) error {
	return migrate(ctx, pool, slog.New(slog.DiscardHandler), version)
}

// The attempt-log reads whose plans the pruning test inspects.
const (
	EndpointStatsSQL  = endpointStatsSQL
	MeasureTrafficSQL = measureTrafficSQL
	ListAttemptsSQL   = listAttemptsSQL
	LedgerWriteSQL    = ledgerWriteSQL
)

// Lingering says whether a group's first message is lingering.
func (c *MessageCommitter) Lingering() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lingering
}

// Waiting returns how many messages wait for a group, for tests that need
// a group formed before it commits.
func (c *MessageCommitter) Waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiting)
}

// Stats returns how many groups were committed and how many messages they
// held.
func (c *MessageCommitter) Stats() (groups, messages int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.groups, c.messages
}

// SetStepTimeout changes the deadline of each trial step.
func (l *TrialLeases) SetStepTimeout(d time.Duration) { l.step = d }

// GetDeliverySQL is GetDelivery's statement.
const GetDeliverySQL = `SELECT ` + deliveryColumns + deliveryFrom + `WHERE d.id = $1`

// ExpireDeliveriesSQL is ExpireDeliveries' statement.
const ExpireDeliveriesSQL = expireDeliveriesSQL

// The searches' statements, for the pruning test.
const (
	SearchMessagesSQL   = searchMessagesSQL
	SearchDeliveriesSQL = searchDeliveriesSQL
)

// SearchBounds is the id range of a search.
func SearchBounds(prefix string, since, until *time.Time, after string) (lo, hi string) {
	return searchBounds(prefix, since, until, after)
}

// StoredStatuses is the stored statuses a search of statuses reads.
func StoredStatuses(statuses []string) []string { return storedStatuses(statuses) }

// ResealAfterRead runs s.ResealSecrets in batches of 500 with read called
// between each batch's read and its writes.
func ResealAfterRead(ctx context.Context, s *Store, read func()) (int, error) {
	s.resealRead = read
	defer func() { s.resealRead = nil }()
	return s.ResealSecrets(ctx, 500, nil)
}

// ParseMigration reads a migration file, for the migrator's tests.
func ParseMigration(name, body string) (Migration, error) { return parseMigration(name, body) }

// MigrateWith applies migrations all (in order) as Migrate applies the
// embedded ones, for the migrator's tests.
func MigrateWith(ctx context.Context, pool *pgxpool.Pool, all []Migration) error {
	return migrateWith(ctx, pool, slog.New(slog.DiscardHandler), all, 0)
}

// PartitionIndexName names a partition's index built for a partitioned
// one.
func PartitionIndexName(index, table, part string) string {
	return partitionIndexName(index, table, part)
}

// QueueHeadSQL is the statement that finds FIFO queues' heads.
const QueueHeadSQL = queueHeadSQL

// WindowPays is windowPays of the kinds' last fetches, given in
// milliseconds, oldest first.
func WindowPays(full, windowed []int, windowAfter time.Duration) bool {
	costs := func(ms []int) fetchCosts {
		var c fetchCosts
		for _, v := range ms {
			c.add(time.Duration(v) * time.Millisecond)
		}
		return c
	}
	return windowPays(costs(full), costs(windowed), windowAfter)
}
