package config

import (
	"io"
	"log/slog"
	"strings"
)

// NewLogger returns a slog logger writing to w in format "text" (default) or
// "json" at level "debug", "info" (default), "warn" or "error".
func NewLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(strings.ToUpper(level))); err != nil {
		return nil, &UsageError{Msg: "--log-level (LOG_LEVEL): must be debug, info, warn or error"}
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "", "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, &UsageError{Msg: "--log-format (LOG_FORMAT): must be text or json"}
}
