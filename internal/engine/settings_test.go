package engine

import "testing"

func TestSettingsStore(t *testing.T) {
	var nilStore *SettingsStore
	if got := nilStore.Load(); got.RegistryMirror != "" || got.kindPaused("CoreDNS") {
		t.Errorf("a nil store has settings: %+v", got)
	}
	kinds := []string{"CoreDNS"}
	s := NewSettingsStore(Settings{PausedKinds: kinds})
	kinds[0] = "Dashboard"
	if !s.Load().kindPaused("CoreDNS") || s.Load().kindPaused("Dashboard") {
		t.Errorf("the store shares the caller's slice: %+v", s.Load())
	}
}
