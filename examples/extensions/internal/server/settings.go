package server

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
)

// MaxSettingsBytes caps a settings file.
const MaxSettingsBytes = 1 << 20

// Settings is an extension's settings file, parsed into a T. Get reads the file on every
// call, a small file, and parses it again only when its content changed, so an edited
// file (or a ConfigMap volume updated by the kubelet) takes effect on the next call,
// and the revision discovery reports changes with it.
type Settings[T any] struct {
	// Path is the file.
	Path string
	// Parse reads the file's content; an error makes every call answer Failure until the
	// file is fixed.
	Parse func([]byte) (T, error)
	// Log receives a line when the settings change.
	Log *slog.Logger

	mu       sync.Mutex
	digest   [sha256.Size]byte
	loaded   bool
	value    T
	revision string
	err      error
}

// Get returns the settings and their revision: a digest of the file's content.
func (s *Settings[T]) Get() (T, string, error) {
	var zero T
	data, err := readCapped(s.Path)
	if err != nil {
		return zero, "", fmt.Errorf("reading the settings: %w", err)
	}
	digest := sha256.Sum256(data)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.loaded || digest != s.digest {
		s.value, s.err = s.Parse(data)
		s.digest, s.loaded = digest, true
		s.revision = "sha256:" + hex.EncodeToString(digest[:8])
		if s.err != nil {
			s.err = fmt.Errorf("the settings file %s: %w", s.Path, s.err)
		}
		if s.Log != nil {
			if s.err != nil {
				s.Log.Error("the settings file is not valid: every call answers Failure until it is fixed", "error", s.err)
			} else {
				s.Log.Info("loaded the settings", "file", s.Path, "revision", s.revision)
			}
		}
	}
	if s.err != nil {
		return zero, s.revision, s.err
	}
	return s.value, s.revision, nil
}

// Revision is the revision of the settings, and their error when they are not valid.
func (s *Settings[T]) Revision() (string, error) {
	_, revision, err := s.Get()
	return revision, err
}

// readCapped reads path, refusing more than MaxSettingsBytes.
func readCapped(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, MaxSettingsBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxSettingsBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, MaxSettingsBytes)
	}
	return data, nil
}
