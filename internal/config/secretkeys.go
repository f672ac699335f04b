package config

import (
	"github.com/hookd/hookd/internal/secretbox"
)

// SecretKeys are the --secret-key and --secret-key-previous flags, bound
// the same way by every command that reads or writes endpoint secrets.
type SecretKeys struct {
	primary, previous *string
}

// BindSecretKeys binds --secret-key (SECRET_KEY) and --secret-key-previous
// (SECRET_KEY_PREVIOUS) on f.
func BindSecretKeys(f *FlagSet) *SecretKeys {
	return &SecretKeys{
		primary: f.String("secret-key", "SECRET_KEY", "",
			"key sealing endpoint signing secrets and header values at rest (AES-256-GCM): 32 bytes in base64 (openssl rand -base64 32); empty stores them in plain text (and warns)"),
		previous: f.String("secret-key-previous", "SECRET_KEY_PREVIOUS", "",
			"earlier secret keys, comma-separated base64, that still open values sealed before a key rotation (api secrets rotate-key)"),
	}
}

// Primary returns the --secret-key's bytes, nil when it is unset. Keyring
// validates it first.
func (k *SecretKeys) Primary() ([]byte, error) {
	if *k.primary == "" {
		return nil, nil
	}
	key, err := secretbox.ParseKey(*k.primary)
	if err != nil {
		return nil, Invalid("secret-key", "SECRET_KEY", "%v", err)
	}
	return key, nil
}

// Keyring returns the configured keyring (nil without --secret-key), or a
// UsageError naming the flag at fault.
func (k *SecretKeys) Keyring() (*secretbox.Keyring, error) {
	if _, err := secretbox.ParseKeyring("", *k.previous); err != nil && *k.primary == "" {
		return nil, Invalid("secret-key-previous", "SECRET_KEY_PREVIOUS", "%v: set --secret-key too", err)
	}
	if *k.primary != "" {
		if _, err := secretbox.ParseKey(*k.primary); err != nil {
			return nil, Invalid("secret-key", "SECRET_KEY", "%v", err)
		}
	}
	kr, err := secretbox.ParseKeyring(*k.primary, *k.previous)
	if err != nil {
		return nil, Invalid("secret-key-previous", "SECRET_KEY_PREVIOUS", "%v", err)
	}
	return kr, nil
}
