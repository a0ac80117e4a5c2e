package engine

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/channels"
	"github.com/kaddons/kaddons/internal/sources"
)

func TestChooseVersion(t *testing.T) {
	channel := func(versions ...string) []channels.Resolved {
		out := make([]channels.Resolved, 0, len(versions))
		for _, v := range versions {
			out = append(out, channels.Resolved{Addon: "coredns", Version: v, Channel: "stable"})
		}
		return out
	}
	pin := []channels.Resolved{{Addon: "coredns", Version: "1.11.3"}}
	for _, tc := range []struct {
		name       string
		candidates []channels.Resolved
		running    string
		upgrade    *addonsv1alpha1.UpgradeSpec
		want       string
		available  string
		held       string
		err        string
	}{
		{name: "new add-on takes the newest", candidates: channel("1.14.6", "1.12.1"), want: "1.14.6"},
		{name: "channel moves up", candidates: channel("1.14.6"), running: "1.12.1", want: "1.14.6"},
		{name: "channel unchanged", candidates: channel("1.12.1"), running: "1.12.1", want: "1.12.1"},
		{name: "channel moving down stays", candidates: channel("1.11.3"), running: "1.12.1", want: "1.12.1",
			held: addonsv1alpha1.ReasonDowngradeRefused},
		{name: "channel moving down with allowDowngrade", candidates: channel("1.11.3"), running: "1.12.1",
			upgrade: &addonsv1alpha1.UpgradeSpec{AllowDowngrade: true}, want: "1.11.3"},
		{name: "pinned downgrade refused", candidates: pin, running: "1.12.1", err: "kaddons does not downgrade"},
		{name: "pinned downgrade allowed", candidates: pin, running: "1.12.1",
			upgrade: &addonsv1alpha1.UpgradeSpec{AllowDowngrade: true}, want: "1.11.3"},
		{name: "a package revision of the running release is no downgrade", candidates: []channels.Resolved{{Addon: "coredns", Version: "1.12.1-kops.2"}},
			running: "1.12.1", want: "1.12.1-kops.2"},
		{name: "a channel moving to a revision of the running release moves", candidates: channel("1.12.1-kops.1"), running: "1.12.1",
			want: "1.12.1-kops.1"},
		{name: "pinned upgrade", candidates: []channels.Resolved{{Addon: "coredns", Version: "1.14.6"}}, running: "1.12.1", want: "1.14.6"},
		{name: "pinned upgrade ignores Manual", candidates: []channels.Resolved{{Addon: "coredns", Version: "1.14.6"}}, running: "1.12.1",
			upgrade: &addonsv1alpha1.UpgradeSpec{Approval: addonsv1alpha1.UpgradeApprovalManual}, want: "1.14.6"},
		{name: "same minor takes the patch", candidates: channel("1.14.6", "1.12.9", "1.12.1"), running: "1.12.1",
			upgrade: &addonsv1alpha1.UpgradeSpec{Policy: addonsv1alpha1.UpgradePolicySameMinor}, want: "1.12.9",
			available: "1.14.6", held: addonsv1alpha1.ReasonUpgradeOutsidePolicy},
		{name: "same minor with no patch stays", candidates: channel("1.14.6"), running: "1.12.1",
			upgrade: &addonsv1alpha1.UpgradeSpec{Policy: addonsv1alpha1.UpgradePolicySameMinor}, want: "1.12.1",
			available: "1.14.6", held: addonsv1alpha1.ReasonUpgradeOutsidePolicy},
		{name: "manual waits", candidates: channel("1.14.6"), running: "1.12.1",
			upgrade: &addonsv1alpha1.UpgradeSpec{Approval: addonsv1alpha1.UpgradeApprovalManual}, want: "1.12.1",
			available: "1.14.6", held: addonsv1alpha1.ReasonUpgradeAwaitingApproval},
		{name: "manual approved", candidates: channel("1.14.6"), running: "1.12.1",
			upgrade: &addonsv1alpha1.UpgradeSpec{Approval: addonsv1alpha1.UpgradeApprovalManual, ApprovedVersion: "1.14.6"}, want: "1.14.6"},
		{name: "manual approved an older candidate", candidates: channel("1.14.6", "1.13.0"), running: "1.12.1",
			upgrade: &addonsv1alpha1.UpgradeSpec{Approval: addonsv1alpha1.UpgradeApprovalManual, ApprovedVersion: "1.13.0"},
			want:    "1.13.0", available: "1.14.6", held: addonsv1alpha1.ReasonUpgradeAwaitingApproval},
		{name: "manual approval of a version the channel does not list waits", candidates: channel("1.14.6"), running: "1.12.1",
			upgrade: &addonsv1alpha1.UpgradeSpec{Approval: addonsv1alpha1.UpgradeApprovalManual, ApprovedVersion: "1.13.0"},
			want:    "1.12.1", available: "1.14.6", held: addonsv1alpha1.ReasonUpgradeAwaitingApproval},
		{name: "manual of a new add-on installs", candidates: channel("1.14.6"),
			upgrade: &addonsv1alpha1.UpgradeSpec{Approval: addonsv1alpha1.UpgradeApprovalManual}, want: "1.14.6"},
		{name: "manual within the minor", candidates: channel("1.14.6", "1.12.9"), running: "1.12.1",
			upgrade: &addonsv1alpha1.UpgradeSpec{Approval: addonsv1alpha1.UpgradeApprovalManual, Policy: addonsv1alpha1.UpgradePolicySameMinor},
			want:    "1.12.1", available: "1.12.9", held: addonsv1alpha1.ReasonUpgradeAwaitingApproval},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := chooseVersion(tc.candidates, tc.running, tc.upgrade)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("chooseVersion error = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			held := ""
			if got.held != nil {
				held = got.held.reason
			}
			if got.resolved.Version != tc.want || got.available != tc.available || held != tc.held {
				t.Errorf("chooseVersion = %s (available %q, held %q), want %s (available %q, held %q)",
					got.resolved.Version, got.available, held, tc.want, tc.available, tc.held)
			}
		})
	}
}

func TestCheckKubernetesVersion(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"packages/demo/1.0.0/metadata.yaml":      "annotations:\n  kaddons.dev.kubernetes.versions.v1: '<1.38.0'\n",
		"packages/demo/1.1.0/metadata.yaml":      "annotations:\n  kaddons.dev.kubernetes.versions.v1: '>=1.30.0'\n",
		"packages/demo/1.2.0/metadata.yaml":      "annotations:\n  kaddons.dev.kubernetes.versions.v1: '>=1.30.0'\n",
		"packages/demo/1.3.0-rc.1/metadata.yaml": "annotations:\n  kaddons.dev.kubernetes.versions.v1: '>=1.30.0'\n",
		"packages/demo/9.0.0/metadata.yaml":      "annotations:\n  kaddons.dev.kubernetes.versions.v1: '>=1.99.0'\n",
	} {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	catalog := channels.NewCatalog(dir, "")
	for _, tc := range []struct {
		version, kubernetes string
		want                KubernetesCheck
	}{
		{version: "1.0.0", kubernetes: "v1.37.2", want: KubernetesCheck{Supported: true, Range: "<1.38.0"}},
		{version: "1.0.0", kubernetes: "v1.38.0", want: KubernetesCheck{Range: "<1.38.0", Suggested: "1.2.0",
			Message: "demo 1.0.0 supports Kubernetes <1.38.0, not 1.38: demo 1.2.0 does; move to it (spec.version, or a channel that lists it) before the cluster upgrade"}},
		{version: "1.1.0", kubernetes: "v1.29.0", want: KubernetesCheck{Range: ">=1.30.0", Suggested: "1.0.0",
			Message: "demo 1.1.0 supports Kubernetes >=1.30.0, not 1.29: demo 1.0.0 does; move to it (spec.version, or a channel that lists it) before the cluster upgrade"}},
		{version: "9.0.0", kubernetes: "v1.20.0", want: KubernetesCheck{Range: ">=1.99.0", Suggested: "1.0.0",
			Message: "demo 9.0.0 supports Kubernetes >=1.99.0, not 1.20: demo 1.0.0 does; move to it (spec.version, or a channel that lists it) before the cluster upgrade"}},
		{version: "1.2.0", kubernetes: "v2.0.0", want: KubernetesCheck{Range: ">=1.30.0", Supported: true}},
	} {
		t.Run(tc.version+" on "+tc.kubernetes, func(t *testing.T) {
			pkg, err := sources.ReadPackageMetadata(catalog.FS(), "demo", tc.version)
			if err != nil {
				t.Fatal(err)
			}
			got, err := CheckKubernetesVersion(catalog, "demo", tc.version, pkg, tc.kubernetes)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("CheckKubernetesVersion = %+v, want %+v", got, tc.want)
			}
		})
	}
}
