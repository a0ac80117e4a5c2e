package main

import (
	"archive/tar"
	"bytes"
	"io"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

func TestPauseImage(t *testing.T) {
	binary := []byte("\x7fELF not really")
	img, err := pauseImage(binary, v1.Platform{OS: "linux", Architecture: "amd64"}, time.Unix(0, 0).UTC())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Config.User != "65535:65535" || len(cfg.Config.Entrypoint) != 1 || cfg.Config.Entrypoint[0] != "/pause" {
		t.Errorf("config: user %q, entrypoint %q; want 65535:65535 and [/pause]", cfg.Config.User, cfg.Config.Entrypoint)
	}
	if cfg.OS != "linux" || cfg.Architecture != "amd64" {
		t.Errorf("platform %s/%s, want linux/amd64", cfg.OS, cfg.Architecture)
	}
	tr := tar.NewReader(mutate.Extract(img))
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		data, _ := io.ReadAll(tr)
		if h.Name == "pause" && (h.Mode != 0o755 || !bytes.Equal(data, binary)) {
			t.Errorf("pause: mode %o, %d bytes; want 755 and the binary", h.Mode, len(data))
		}
	}
	if len(names) != 1 || names[0] != "pause" {
		t.Errorf("files %q, want [pause]", names)
	}
	again, err := pauseImage(binary, v1.Platform{OS: "linux", Architecture: "amd64"}, time.Unix(0, 0).UTC())
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := img.Digest()
	d2, _ := again.Digest()
	if d1 != d2 {
		t.Errorf("not reproducible: %s then %s", d1, d2)
	}
}
