package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// config is what hookd login stores: the API's address and a token.
type config struct {
	API   string `json:"api"`
	Token string `json:"token"`
}

// userConfigDir is os.UserConfigDir with the environment read from getenv,
// so a run's environment is the one it was given.
func userConfigDir(goos string, getenv func(string) string) (string, error) {
	var dir string
	switch goos {
	case "windows":
		dir = getenv("AppData")
		if dir == "" {
			return "", errors.New("%AppData% is not defined")
		}
	case "darwin", "ios":
		dir = getenv("HOME")
		if dir == "" {
			return "", errors.New("$HOME is not defined")
		}
		dir = filepath.Join(dir, "Library", "Application Support")
	case "plan9":
		dir = getenv("home")
		if dir == "" {
			return "", errors.New("$home is not defined")
		}
		dir = filepath.Join(dir, "lib")
	default:
		dir = getenv("XDG_CONFIG_HOME")
		if dir == "" {
			dir = getenv("HOME")
			if dir == "" {
				return "", errors.New("neither $XDG_CONFIG_HOME nor $HOME are defined")
			}
			dir = filepath.Join(dir, ".config")
		} else if !filepath.IsAbs(dir) {
			return "", errors.New("path in $XDG_CONFIG_HOME is relative")
		}
	}
	return dir, nil
}

// configPath is the login file: hookd/config.json in the user's
// configuration directory.
func (a *app) configPath() (string, error) {
	dir, err := a.env.ConfigDir()
	if err != nil {
		return "", fmt.Errorf("config directory: %w", err)
	}
	return filepath.Join(dir, "hookd", "config.json"), nil
}

// readConfig reads the login file; a missing one is an empty config.
func (a *app) readConfig() (config, error) {
	path, err := a.configPath()
	if err != nil {
		return config{}, err
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return config{}, nil
	}
	if err != nil {
		return config{}, fmt.Errorf("read %s: %w", path, err)
	}
	var c config
	if err := json.Unmarshal(b, &c); err != nil {
		return config{}, fmt.Errorf("read %s: %w", path, err)
	}
	return c, nil
}

// writeConfig stores c in the login file, readable by the user alone: it
// holds a token.
func (a *app) writeConfig(c config) (string, error) {
	path, err := a.configPath()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return "", fmt.Errorf("encode config: %w", err)
	}
	// Written beside and renamed, so a crash never leaves half a file; the
	// temporary file is created 0600, never wider for a moment.
	tmp, err := os.CreateTemp(filepath.Dir(path), ".config-*.json")
	if err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if err := tmp.Chmod(0o600); err != nil {
		_ = tmp.Close()
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		_ = tmp.Close()
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return path, nil
}

// resolveConfig is the API and token a command uses: --api, then
// HOOKD_API and HOOKD_TOKEN, then the login file.
func (a *app) resolveConfig() (config, error) {
	file, err := a.readConfig()
	if err != nil {
		return config{}, err
	}
	c := file
	if v := a.env.Getenv("HOOKD_API"); v != "" {
		c.API = v
	}
	if v := a.env.Getenv("HOOKD_TOKEN"); v != "" {
		c.Token = v
	}
	if a.apiFlag != "" {
		c.API = a.apiFlag
	}
	if c.API == "" || c.Token == "" {
		return config{}, errors.New("not logged in: run hookd login, or set HOOKD_API and HOOKD_TOKEN")
	}
	return c, nil
}
