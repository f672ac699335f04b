package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/hookd/hookd/internal/secretbox"
)

// Endpoint signing secrets and header values are stored sealed
// (internal/secretbox) when the store has a keyring: sealed on every write,
// opened on every read, so no caller sees an envelope. A secret is bound to
// its endpoint (the AEAD's context), not to its column: rotation moves the
// current secret into previous_secret as it is. A header value is bound to
// its endpoint and header name, so a value moved to another header or
// endpoint does not open there.

// endpointSecretContext is the context a signing secret of endpoint id is
// sealed for.
func endpointSecretContext(id string) string { return "endpoint:" + id + ":signing-secret" }

// endpointHeaderContext is the context the value of header name of
// endpoint id is sealed for. name is the header's name as stored (the
// headers object's key).
func endpointHeaderContext(id, name string) string {
	return "endpoint:" + id + ":header:" + name
}

// endpointDestinationContext is the context the destination credentials
// of endpoint id are sealed for.
func endpointDestinationContext(id string) string {
	return "endpoint:" + id + ":destination-credentials"
}

// sealDestinationCredentials returns c as the stored JSON object, sealed
// for endpoint id when the store has a keyring; nil for none.
func (s *Store) sealDestinationCredentials(id string, c map[string]string) (*string, error) {
	if len(c) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("destination credentials: %w", err)
	}
	sealed, err := s.secrets.Seal(string(b), endpointDestinationContext(id))
	if err != nil {
		return nil, fmt.Errorf("seal destination credentials: %w", err)
	}
	return &sealed, nil
}

// sealEndpointHeaders returns h with every value sealed for endpoint id;
// without a keyring, h as it is.
func (s *Store) sealEndpointHeaders(id string, h map[string]string) (map[string]string, error) {
	if s.secrets == nil || h == nil {
		return h, nil
	}
	out := make(map[string]string, len(h))
	for name, v := range h {
		sealed, err := s.secrets.Seal(v, endpointHeaderContext(id, name))
		if err != nil {
			return nil, fmt.Errorf("seal header %s: %w", name, err)
		}
		out[name] = sealed
	}
	return out, nil
}

// Keyring returns the store's keyring (nil without one), so code storing
// other sealed values seals them the same way.
func (s *Store) Keyring() *secretbox.Keyring { return s.secrets }

// openEndpointSecrets replaces e's stored secrets and header values by
// their plaintext and sets its destination credentials from creds, as
// stored ("" for none).
func (s *Store) openEndpointSecrets(e *Endpoint, creds string) error {
	if creds != "" {
		pt, err := s.secrets.Open(creds, endpointDestinationContext(e.ID))
		if err != nil {
			return fmt.Errorf("open destination credentials of endpoint %s: %w", e.ID, err)
		}
		if err := json.Unmarshal([]byte(pt), &e.DestinationCredentials); err != nil {
			return fmt.Errorf("destination credentials of endpoint %s: %w", e.ID, err)
		}
	}
	ctx := endpointSecretContext(e.ID)
	var err error
	if e.Secret, err = s.secrets.Open(e.Secret, ctx); err != nil {
		return fmt.Errorf("open secret of endpoint %s: %w", e.ID, err)
	}
	if e.PreviousSecret != "" {
		if e.PreviousSecret, err = s.secrets.Open(e.PreviousSecret, ctx); err != nil {
			return fmt.Errorf("open previous secret of endpoint %s: %w", e.ID, err)
		}
	}
	for name, v := range e.Headers {
		if e.Headers[name], err = s.secrets.Open(v, endpointHeaderContext(e.ID, name)); err != nil {
			return fmt.Errorf("open header %s of endpoint %s: %w", name, e.ID, err)
		}
	}
	return nil
}

// SecretsReport is what CheckSecrets found.
type SecretsReport struct {
	// Plain counts the stored secret values (signing secrets and header
	// values) in plain text.
	Plain int64
	// Stale counts the values sealed under another key than the primary.
	Stale int64
}

// ErrSecretKey is a stored secret the store's keyring cannot open: the
// configured secret key is wrong, missing, or lacks a previous key.
var ErrSecretKey = errors.New("stored endpoint secrets cannot be opened with the configured secret key")

// CheckSecrets opens one stored value per key id found among signing
// secrets and header values (deleted endpoints included), so a wrong or
// missing key fails at startup rather than as bad signatures or missing
// headers, and counts the values not sealed under the primary key.
func (s *Store) CheckSecrets(ctx context.Context) (SecretsReport, error) {
	rows, err := s.pool.Query(ctx, `
		WITH v AS (
			SELECT id, secret AS value, NULL::text AS header, false AS dest FROM endpoints
			UNION ALL
			SELECT id, previous_secret, NULL, false FROM endpoints WHERE previous_secret IS NOT NULL
			UNION ALL
			SELECT e.id, h.value, h.key, false FROM endpoints e, jsonb_each_text(e.headers) h
			UNION ALL
			SELECT id, destination_credentials, NULL, true FROM endpoints WHERE destination_credentials IS NOT NULL
		), k AS (
			SELECT id, value, header, dest, CASE WHEN value LIKE 'hks1.%' THEN split_part(value, '.', 2) ELSE '' END AS key_id FROM v
		)
		SELECT DISTINCT ON (key_id) key_id, id, value, header, dest, count(*) OVER (PARTITION BY key_id)
		FROM k ORDER BY key_id, id, dest, header NULLS FIRST`)
	if err != nil {
		return SecretsReport{}, fmt.Errorf("check secrets: %w", err)
	}
	defer rows.Close()
	var rep SecretsReport
	for rows.Next() {
		var keyID, id, value string
		var header *string
		var dest bool
		var n int64
		if err := rows.Scan(&keyID, &id, &value, &header, &dest, &n); err != nil {
			return SecretsReport{}, fmt.Errorf("check secrets: %w", err)
		}
		switch {
		case keyID == "":
			rep.Plain += n
			continue
		case keyID != s.secrets.PrimaryID():
			rep.Stale += n
		}
		aad := endpointSecretContext(id)
		switch {
		case dest:
			aad = endpointDestinationContext(id)
		case header != nil:
			aad = endpointHeaderContext(id, *header)
		}
		if _, err := s.secrets.Open(value, aad); err != nil {
			return SecretsReport{}, secretKeyError(s.secrets, keyID, n, err)
		}
	}
	if err := rows.Err(); err != nil {
		return SecretsReport{}, fmt.Errorf("check secrets: %w", err)
	}
	return rep, nil
}

func secretKeyError(k *secretbox.Keyring, keyID string, n int64, err error) error {
	switch {
	case errors.Is(err, secretbox.ErrNoKeyring):
		return fmt.Errorf("%w: %d secrets are sealed under key id %s and no --secret-key (SECRET_KEY) is set", ErrSecretKey, n, keyID)
	case errors.Is(err, secretbox.ErrUnknownKey):
		return fmt.Errorf("%w: %d secrets are sealed under key id %s, but --secret-key has id %s and no --secret-key-previous matches", ErrSecretKey, n, keyID, k.PrimaryID())
	}
	return fmt.Errorf("%w: a secret sealed under key id %s does not open: %v", ErrSecretKey, keyID, err)
}

// ResealSecrets seals every stored secret and header value (deleted
// endpoints' too) that is not sealed under the primary key, batch
// endpoints per transaction, and returns how many endpoints changed. It
// runs beside live processes: each row is rewritten only if its stored
// values are still those it read (a secret rotated or headers replaced
// meanwhile are read again by the next run), and it sends no NOTIFY,
// since no plaintext changes. With a nil keyring it does nothing.
func (s *Store) ResealSecrets(ctx context.Context, batch int, progress func(done int)) (int, error) {
	if s.secrets == nil {
		return 0, nil
	}
	if batch < 1 {
		batch = 500
	}
	done, after := 0, ""
	for {
		n, last, err := s.resealBatch(ctx, after, batch)
		done += n
		if err != nil {
			return done, err
		}
		if progress != nil && n > 0 {
			progress(done)
		}
		if last == "" {
			return done, nil
		}
		after = last
	}
}

// resealRow is an endpoint's stored secret values as resealBatch read them.
type resealRow struct {
	id, secret string
	previous   *string
	headers    map[string]string
	// destCreds are the sealed destination credentials, nil for none.
	destCreds *string
}

// current reports whether every value of r is sealed under k's primary key.
func (r resealRow) current(k *secretbox.Keyring) bool {
	if !k.Current(r.secret) || (r.previous != nil && !k.Current(*r.previous)) || (r.destCreds != nil && !k.Current(*r.destCreds)) {
		return false
	}
	for _, v := range r.headers {
		if !k.Current(v) {
			return false
		}
	}
	return true
}

// resealed returns r's values sealed under k's primary key.
func (r resealRow) resealed(k *secretbox.Keyring) (resealRow, error) {
	out := resealRow{id: r.id, headers: make(map[string]string, len(r.headers))}
	aad := endpointSecretContext(r.id)
	var err error
	if out.secret, _, err = k.Reseal(r.secret, aad); err != nil {
		return resealRow{}, secretKeyError(k, keyIDOf(r.secret), 1, err)
	}
	if r.previous != nil {
		p, _, err := k.Reseal(*r.previous, aad)
		if err != nil {
			return resealRow{}, secretKeyError(k, keyIDOf(*r.previous), 1, err)
		}
		out.previous = &p
	}
	if r.destCreds != nil {
		c, _, err := k.Reseal(*r.destCreds, endpointDestinationContext(r.id))
		if err != nil {
			return resealRow{}, secretKeyError(k, keyIDOf(*r.destCreds), 1, err)
		}
		out.destCreds = &c
	}
	for name, v := range r.headers {
		if out.headers[name], _, err = k.Reseal(v, endpointHeaderContext(r.id, name)); err != nil {
			return resealRow{}, secretKeyError(k, keyIDOf(v), 1, err)
		}
	}
	return out, nil
}

// resealBatch reseals the stale secret values of up to batch endpoints
// after after in id order, returning the last id read ("" at the end).
func (s *Store) resealBatch(ctx context.Context, after string, batch int) (changed int, last string, err error) {
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		changed, last = 0, ""
		rows, err := tx.Query(ctx, `
			SELECT id, secret, previous_secret, headers, destination_credentials FROM endpoints WHERE id > $1 ORDER BY id LIMIT $2`, after, batch)
		if err != nil {
			return fmt.Errorf("reseal secrets: %w", err)
		}
		var todo []resealRow
		n := 0
		for rows.Next() {
			var r resealRow
			if err := rows.Scan(&r.id, &r.secret, &r.previous, &r.headers, &r.destCreds); err != nil {
				rows.Close()
				return fmt.Errorf("reseal secrets: %w", err)
			}
			n++
			last = r.id
			if !r.current(s.secrets) {
				todo = append(todo, r)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("reseal secrets: %w", err)
		}
		if n < batch {
			last = ""
		}
		if s.resealRead != nil {
			s.resealRead()
		}
		for _, r := range todo {
			nr, err := r.resealed(s.secrets)
			if err != nil {
				return err
			}
			// Only the row as read is rewritten; a row changed meanwhile
			// (a rotation or a headers update sealed under the primary
			// already, or under a previous key by a process not yet
			// restarted) is left to the next run, which CheckSecrets'
			// Stale count tells of. jsonb compares by value, so the
			// headers read compare equal to those stored.
			tag, err := tx.Exec(ctx, `
				UPDATE endpoints SET secret = $2, previous_secret = $3, headers = $4, destination_credentials = $8
				WHERE id = $1 AND secret = $5 AND previous_secret IS NOT DISTINCT FROM $6 AND headers = $7
					AND destination_credentials IS NOT DISTINCT FROM $9`,
				r.id, nr.secret, nr.previous, nr.headers, r.secret, r.previous, r.headers, nr.destCreds, r.destCreds)
			if err != nil {
				return fmt.Errorf("reseal secrets of endpoint %s: %w", r.id, err)
			}
			changed += int(tag.RowsAffected())
		}
		return nil
	})
	return changed, last, err
}

func keyIDOf(v string) string {
	if e, err := secretbox.ParseEnvelope(v); err == nil {
		return e.KeyID
	}
	return "(plain)"
}

// CheckSecretsAtStart is CheckSecrets as a process starts: an error when
// a stored secret or header value does not open, a warning when they are
// (or stay) stored in plain text or under a previous key.
func (s *Store) CheckSecretsAtStart(ctx context.Context) error {
	rep, err := s.CheckSecrets(ctx)
	if err != nil {
		return err
	}
	if s.secrets == nil {
		s.logger.Warn("secrets_plaintext", slog.String("reason", "no --secret-key (SECRET_KEY): endpoint signing secrets and header values are stored in plain text"),
			slog.Int64("plain", rep.Plain))
		return nil
	}
	if rep.Plain > 0 || rep.Stale > 0 {
		s.logger.Warn("secrets_not_current", slog.String("key_id", s.secrets.PrimaryID()), slog.Int64("plain", rep.Plain), slog.Int64("previous_key", rep.Stale),
			slog.String("fix", "run `api secrets rotate-key` to seal them under the current key"))
	}
	return nil
}
