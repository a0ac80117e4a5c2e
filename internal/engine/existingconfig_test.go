package engine

import "testing"

func TestImageTag(t *testing.T) {
	for image, want := range map[string]string{
		"registry.k8s.io/coredns/coredns:v1.14.6":          "1.14.6",
		"registry.k8s.io/coredns/coredns:1.12.1@sha256:ab": "1.12.1",
		"localhost:5000/coredns":                           "",
		"coredns":                                          "",
	} {
		if got := ImageTag(image); got != want {
			t.Errorf("ImageTag(%q) = %q, want %q", image, got, want)
		}
	}
}
