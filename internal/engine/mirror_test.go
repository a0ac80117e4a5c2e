package engine

import (
	"testing"
)

func TestMirrorImage(t *testing.T) {
	for _, tc := range []struct{ image, mirror, want string }{
		{"registry.k8s.io/coredns/coredns:v1.12.1", "mirror.example.com/k8s", "mirror.example.com/k8s/coredns/coredns:v1.12.1"},
		{"registry.k8s.io/coredns/coredns:v1.12.1", "mirror.example.com/k8s/", "mirror.example.com/k8s/coredns/coredns:v1.12.1"},
		{"kubernetesui/dashboard:v2.7.0", "mirror.example.com", "mirror.example.com/kubernetesui/dashboard:v2.7.0"},
		{"busybox", "mirror.example.com", "mirror.example.com/busybox"},
		{"localhost/app:1", "mirror:5000", "mirror:5000/app:1"},
		{"registry:5000/team/app@sha256:abc", "mirror.example.com", "mirror.example.com/team/app@sha256:abc"},
	} {
		if got := MirrorImage(tc.image, tc.mirror); got != tc.want {
			t.Errorf("MirrorImage(%q, %q) = %q, want %q", tc.image, tc.mirror, got, tc.want)
		}
	}
}
