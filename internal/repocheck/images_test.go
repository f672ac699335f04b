package repocheck

import (
	"image"
	"image/png"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// docImageLink matches a Markdown image whose target is under docs/img,
// relative to the document.
var docImageLink = regexp.MustCompile(`!\[[^\]]*\]\(((?:\.\./)*(?:docs/)?img/[^)\s]+)\)`)

// meanLuma returns an image's mean luminance, from 0 (black) to 1 (white),
// sampled on a grid.
func meanLuma(img image.Image) float64 {
	b := img.Bounds()
	var sum float64
	n := 0
	for y := b.Min.Y; y < b.Max.Y; y += 4 {
		for x := b.Min.X; x < b.Max.X; x += 4 {
			r, g, bl, _ := img.At(x, y).RGBA()
			sum += (0.2126*float64(r) + 0.7152*float64(g) + 0.0722*float64(bl)) / 0xffff
			n++
		}
	}
	return sum / float64(n)
}

// TestDocScreenshotsExistAndAreShown: every image a tracked document shows
// from docs/img is tracked, every tracked docs/img/*.png is shown
// somewhere, the portal's page shows it light and dark on desktop and
// phone, and each screenshot is what its name says: a desktop one 1280
// pixels wide, a phone one 390 CSS pixels at scale 2, a light one mostly
// light and a dark one mostly dark.
func TestDocScreenshotsExistAndAreShown(t *testing.T) {
	t.Parallel()
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	require.NoError(t, err, "the repository's files are listed with git")
	root := strings.TrimSpace(string(top))
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "*.md", "docs/img").Output()
	require.NoError(t, err)
	var docs, images []string
	for _, p := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		switch {
		case strings.HasSuffix(p, ".md"):
			docs = append(docs, p)
		case strings.HasSuffix(p, ".png"):
			images = append(images, p)
		}
	}
	require.NotEmpty(t, images, "docs/img holds the screenshots")

	shown := map[string][]string{}
	for _, d := range docs {
		b, err := os.ReadFile(filepath.Join(root, d))
		if os.IsNotExist(err) {
			continue // deleted in the work tree, not yet committed
		}
		require.NoError(t, err)
		for _, m := range docImageLink.FindAllStringSubmatch(string(b), -1) {
			target := path.Clean(path.Join(path.Dir(d), m[1]))
			require.Contains(t, images, target, "%s shows %s, which is not tracked", d, m[1])
			shown[target] = append(shown[target], d)
		}
	}
	for _, img := range images {
		require.NotEmpty(t, shown[img], "%s is shown by no document", img)
	}
	for _, want := range []string{"portal-desktop-light", "portal-desktop-dark", "portal-phone-light", "portal-phone-dark"} {
		require.True(t, slices.Contains(shown["docs/img/"+want+".png"], "docs/portal.md"), "docs/portal.md shows %s", want)
	}

	for _, p := range images {
		name := strings.TrimSuffix(path.Base(p), ".png")
		f, err := os.Open(filepath.Join(root, p))
		require.NoError(t, err)
		img, err := png.Decode(f)
		_ = f.Close()
		require.NoError(t, err, p)
		w := img.Bounds().Dx()
		switch {
		case strings.Contains(name, "-desktop-"):
			require.Equal(t, 1280, w, p)
		case strings.Contains(name, "-phone-"):
			require.Equal(t, 2*390, w, p)
		}
		luma := meanLuma(img)
		switch {
		case strings.HasSuffix(name, "-light"):
			require.Greater(t, luma, 0.6, "%s is named light", p)
		case strings.HasSuffix(name, "-dark"):
			require.Less(t, luma, 0.4, "%s is named dark", p)
		}
	}
}
