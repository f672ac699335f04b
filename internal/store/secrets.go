package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/hookd/hookd/internal/secretbox"
)

// Endpoint signing secrets are stored sealed (internal/secretbox) when the
// store has a keyring: sealed on every write, opened on every read, so no
// caller sees an envelope. A value is bound to its endpoint (the AEAD's
// context), not to its column: rotation moves the current secret into
// previous_secret as it is. Values sealed elsewhere later (endpoint header
// values) take a context of their own, e.g. "endpoint:ep_x:header:X-Foo",
// through Keyring.Seal and Keyring.Open, as the secrets do here.

// endpointSecretContext is the context a signing secret of endpoint id is
// sealed for.
func endpointSecretContext(id string) string { return "endpoint:" + id + ":signing-secret" }

// Keyring returns the store's keyring (nil without one), so code storing
// other sealed values seals them the same way.
func (s *Store) Keyring() *secretbox.Keyring { return s.secrets }

// openEndpointSecrets replaces e's stored secrets by their plaintext.
func (s *Store) openEndpointSecrets(e *Endpoint) error {
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
	return nil
}

// SecretsReport is what CheckSecrets found.
type SecretsReport struct {
	// Plain counts the stored secrets in plain text.
	Plain int64
	// Stale counts the secrets sealed under another key than the primary.
	Stale int64
}

// ErrSecretKey is a stored secret the store's keyring cannot open: the
// configured secret key is wrong, missing, or lacks a previous key.
var ErrSecretKey = errors.New("stored endpoint secrets cannot be opened with the configured secret key")

// CheckSecrets opens one stored secret per key id found (deleted endpoints
// included), so a wrong or missing key fails at startup rather than as
// bad signatures, and counts the secrets not sealed under the primary key.
func (s *Store) CheckSecrets(ctx context.Context) (SecretsReport, error) {
	rows, err := s.pool.Query(ctx, `
		WITH v AS (
			SELECT id, secret AS value FROM endpoints
			UNION ALL
			SELECT id, previous_secret FROM endpoints WHERE previous_secret IS NOT NULL
		), k AS (
			SELECT id, value, CASE WHEN value LIKE 'hks1.%' THEN split_part(value, '.', 2) ELSE '' END AS key_id FROM v
		)
		SELECT DISTINCT ON (key_id) key_id, id, value, count(*) OVER (PARTITION BY key_id)
		FROM k ORDER BY key_id, id`)
	if err != nil {
		return SecretsReport{}, fmt.Errorf("check secrets: %w", err)
	}
	defer rows.Close()
	var rep SecretsReport
	for rows.Next() {
		var keyID, id, value string
		var n int64
		if err := rows.Scan(&keyID, &id, &value, &n); err != nil {
			return SecretsReport{}, fmt.Errorf("check secrets: %w", err)
		}
		switch {
		case keyID == "":
			rep.Plain += n
			continue
		case keyID != s.secrets.PrimaryID():
			rep.Stale += n
		}
		if _, err := s.secrets.Open(value, endpointSecretContext(id)); err != nil {
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

// ResealSecrets seals every stored secret (deleted endpoints' too) that
// is not sealed under the primary key, batch endpoints per transaction,
// and returns how many endpoints changed. It runs beside live processes:
// each row is rewritten only if its stored values are still those it
// read (a secret rotated meanwhile is read again), and it sends no NOTIFY,
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

// resealBatch reseals the stale secrets of up to batch endpoints after
// after in id order, returning the last id read ("" at the end).
func (s *Store) resealBatch(ctx context.Context, after string, batch int) (changed int, last string, err error) {
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		changed, last = 0, ""
		rows, err := tx.Query(ctx, `
			SELECT id, secret, previous_secret FROM endpoints WHERE id > $1 ORDER BY id LIMIT $2`, after, batch)
		if err != nil {
			return fmt.Errorf("reseal secrets: %w", err)
		}
		type row struct {
			id, secret string
			previous   *string
		}
		var todo []row
		n := 0
		for rows.Next() {
			var r row
			if err := rows.Scan(&r.id, &r.secret, &r.previous); err != nil {
				rows.Close()
				return fmt.Errorf("reseal secrets: %w", err)
			}
			n++
			last = r.id
			if !s.secrets.Current(r.secret) || (r.previous != nil && !s.secrets.Current(*r.previous)) {
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
		for _, r := range todo {
			ctxs := endpointSecretContext(r.id)
			secret, _, err := s.secrets.Reseal(r.secret, ctxs)
			if err != nil {
				return secretKeyError(s.secrets, keyIDOf(r.secret), 1, err)
			}
			var previous *string
			if r.previous != nil {
				p, _, err := s.secrets.Reseal(*r.previous, ctxs)
				if err != nil {
					return secretKeyError(s.secrets, keyIDOf(*r.previous), 1, err)
				}
				previous = &p
			}
			// Only the row as read is rewritten; a row changed meanwhile
			// (a rotation sealed under the primary already, or under a
			// previous key by a process not yet restarted) is left to the
			// next run, which CheckSecrets' Stale count tells of.
			tag, err := tx.Exec(ctx, `
				UPDATE endpoints SET secret = $2, previous_secret = $3
				WHERE id = $1 AND secret = $4 AND previous_secret IS NOT DISTINCT FROM $5`,
				r.id, secret, previous, r.secret, r.previous)
			if err != nil {
				return fmt.Errorf("reseal secret of endpoint %s: %w", r.id, err)
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
// a stored secret does not open, a warning when secrets are (or stay)
// stored in plain text or under a previous key.
func (s *Store) CheckSecretsAtStart(ctx context.Context) error {
	rep, err := s.CheckSecrets(ctx)
	if err != nil {
		return err
	}
	if s.secrets == nil {
		s.logger.Warn("secrets_plaintext", slog.String("reason", "no --secret-key (SECRET_KEY): endpoint signing secrets are stored in plain text"),
			slog.Int64("plain", rep.Plain))
		return nil
	}
	if rep.Plain > 0 || rep.Stale > 0 {
		s.logger.Warn("secrets_not_current", slog.String("key_id", s.secrets.PrimaryID()), slog.Int64("plain", rep.Plain), slog.Int64("previous_key", rep.Stale),
			slog.String("fix", "run `api secrets rotate-key` to seal them under the current key"))
	}
	return nil
}
