package main

import (
	"context"
	"fmt"
	"io"

	"github.com/hookd/hookd/internal/config"
	"github.com/hookd/hookd/internal/store"
)

const secretsSynopsis = `usage: api secrets rotate-key --secret-key NEW --secret-key-previous OLD[,OLDER] [--batch 500]

Reseals every stored endpoint signing secret and header value (deleted
endpoints' too) under --secret-key, opening those sealed under a
--secret-key-previous key, and seals those still in plain text. It runs
while the service runs: first give every api and dispatcher process the new
key with the old one as previous, then run this, then drop the previous key.
Each batch is one transaction; a secret rotated or headers replaced
meanwhile are left as that write left them.`

// runSecrets runs "api secrets rotate-key".
func runSecrets(ctx context.Context, args []string, getenv func(string) string, stdout, _ io.Writer) error {
	fs := config.New("api secrets", secretsSynopsis, getenv, stdout)
	if len(args) == 0 {
		return &config.UsageError{Msg: "secrets: want a subcommand: rotate-key (api secrets --help)"}
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "-h", "-help", "--help":
		fs.PrintHelp()
		return config.ErrHelp
	case "rotate-key":
	default:
		return &config.UsageError{Msg: fmt.Sprintf("secrets: unknown subcommand %q: want rotate-key", sub)}
	}
	// The api's database flags, so the api's environment serves it behind
	// a pooler too; nothing of it needs a session.
	database := config.BindDatabase(fs, "", "the api's migrations (this command needs none)")
	keys := config.BindSecretKeys(fs)
	batch := fs.Int("batch", "", 500, "endpoints resealed per transaction (1-10000)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(fs.Args()) > 0 {
		return &config.UsageError{Msg: fmt.Sprintf("secrets %s: unexpected argument %q", sub, fs.Args()[0])}
	}
	keyring, err := keys.Keyring()
	if err != nil {
		return err
	}
	if keyring == nil {
		return config.Invalid("secret-key", "SECRET_KEY", "is required: the key to seal the secrets under")
	}
	if *batch < 1 || *batch > 10000 {
		return &config.UsageError{Msg: "secrets rotate-key: --batch must be from 1 to 10000"}
	}
	if err := database.Check(""); err != nil {
		return err
	}
	pool, err := store.OpenPool(ctx, database.PoolConfig(2, "hookd-api-secrets"))
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := requireCurrentSchema(ctx, pool); err != nil {
		return err
	}
	st := store.New(pool, nil, store.WithKeyring(keyring))
	n, err := st.ResealSecrets(ctx, *batch, nil)
	if err != nil {
		return fmt.Errorf("rotate key (after resealing %d endpoints): %w", n, err)
	}
	fmt.Fprintf(stdout, "resealed the secrets of %d endpoints under key id %s\n", n, keyring.PrimaryID())
	return nil
}
