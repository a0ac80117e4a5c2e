package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestChannelsDir(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		flag    string
		want    string
		wantErr string
	}{
		{name: "flag naming a directory", flag: dir, want: dir},
		{name: "flag naming a missing directory", flag: filepath.Join(dir, "missing"), wantErr: "is not a directory"},
		{name: "flag naming a file", flag: file, wantErr: "is not a directory"},
		{name: "default finds ./channels", flag: "", want: "channels"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := channelsDir(tc.flag)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("channelsDir(%q) error = %v, want %q", tc.flag, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasSuffix(got, tc.want) || !filepath.IsAbs(got) {
				t.Fatalf("channelsDir(%q) = %q, want an absolute path ending in %q", tc.flag, got, tc.want)
			}
		})
	}
}
