package repocheck

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// maxFileSize is the largest file that may be tracked, documented images
// aside: anything bigger is a build output, a dump or a data set.
const maxFileSize = 1 << 20

// documentedImage reports whether a tracked path is an image the docs show,
// which may be bigger.
func documentedImage(p string) bool {
	ok, _ := path.Match("docs/img/*.png", p)
	return ok
}

// executableFormat names the executable format head (a file's first bytes)
// starts with, or returns "".
func executableFormat(head []byte) string {
	for _, f := range []struct {
		name  string
		magic []byte
	}{
		{"ELF", []byte{0x7f, 'E', 'L', 'F'}},
		{"Mach-O", []byte{0xfe, 0xed, 0xfa, 0xce}},
		{"Mach-O", []byte{0xfe, 0xed, 0xfa, 0xcf}},
		{"Mach-O", []byte{0xce, 0xfa, 0xed, 0xfe}},
		{"Mach-O", []byte{0xcf, 0xfa, 0xed, 0xfe}},
		{"Mach-O universal", []byte{0xca, 0xfe, 0xba, 0xbe}},
		{"PE", []byte{'M', 'Z'}},
	} {
		if bytes.HasPrefix(head, f.magic) {
			return f.name
		}
	}
	return ""
}

// problem says why a tracked file must not be committed, or returns "".
func problem(p string, size int64, head []byte) string {
	if f := executableFormat(head); f != "" {
		return "an executable binary (" + f + "): build outputs are never committed"
	}
	if size > maxFileSize && !documentedImage(p) {
		return "over 1 MiB and not a documented image (docs/img/*.png)"
	}
	return ""
}

func TestProblem(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		path string
		size int64
		head []byte
		want string
	}{
		{"Go source", "cmd/api/main.go", 900, []byte("package main"), ""},
		{"shell script", "deploy/run-local.sh", 9000, []byte("#!/usr/bin/env bash"), ""},
		{"Linux binary", "api", 26 << 20, []byte{0x7f, 'E', 'L', 'F', 2, 1, 1}, "ELF"},
		{"small Linux binary", "bin/x", 4096, []byte{0x7f, 'E', 'L', 'F'}, "ELF"},
		{"macOS binary", "dispatcher", 8 << 20, []byte{0xcf, 0xfa, 0xed, 0xfe, 7, 0, 0, 1}, "Mach-O"},
		{"Windows binary", "api.exe", 8 << 20, []byte("MZ\x90\x00"), "PE"},
		{"large dump", "testdata/dump.json", 2 << 20, []byte("{"), "over 1 MiB"},
		{"large documented image", "docs/img/dashboard.png", 2 << 20, []byte("\x89PNG"), ""},
		{"large image elsewhere", "internal/api/static/big.png", 2 << 20, []byte("\x89PNG"), "over 1 MiB"},
		{"exactly 1 MiB", "testdata/one.bin", 1 << 20, []byte("x"), ""},
	} {
		got := problem(tc.path, tc.size, tc.head)
		if tc.want == "" {
			require.Empty(t, got, tc.name)
		} else {
			require.Contains(t, got, tc.want, tc.name)
		}
	}
}

// TestNoBinariesOrLargeFilesTracked fails when a tracked file is an
// executable binary, or over 1 MiB and not a documented image.
func TestNoBinariesOrLargeFilesTracked(t *testing.T) {
	t.Parallel()
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	require.NoError(t, err, "the repository's files are listed with git")
	root := strings.TrimSpace(string(top))
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	require.NoError(t, err)
	files := strings.Split(strings.TrimRight(string(out), "\x00"), "\x00")
	require.Greater(t, len(files), 50, "git ls-files listed the repository")
	var bad []string
	for _, p := range files {
		fi, err := os.Lstat(filepath.Join(root, p))
		if os.IsNotExist(err) {
			continue // deleted in the work tree, not yet committed
		}
		require.NoError(t, err)
		if !fi.Mode().IsRegular() {
			continue
		}
		f, err := os.Open(filepath.Join(root, p))
		require.NoError(t, err)
		head := make([]byte, 8)
		n, err := io.ReadFull(f, head)
		_ = f.Close()
		if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
			require.NoError(t, err)
		}
		if why := problem(p, fi.Size(), head[:n]); why != "" {
			bad = append(bad, p+": "+why)
		}
	}
	require.Empty(t, bad, "tracked files that must not be committed")
}
