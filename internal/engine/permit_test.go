package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	configv1alpha1 "github.com/kaddons/kaddons/api/config/v1alpha1"
	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/channels"
	"github.com/kaddons/kaddons/internal/policy"
)

func TestPermit(t *testing.T) {
	for _, tc := range []struct {
		name       string
		permit     PermitFunc
		wantStop   bool
		wantClass  conditionClass
		wantErr    bool
		wantReason string
	}{
		{name: "no policy hook"},
		{name: "permitted", permit: func(context.Context, PermitRequest) (string, error) { return "", nil }},
		{name: "refused", permit: func(context.Context, PermitRequest) (string, error) { return "rule r forbids it", nil },
			wantStop: true, wantClass: classStalled, wantReason: addonsv1alpha1.ReasonNotPermitted},
		{name: "policy unreadable", permit: func(context.Context, PermitRequest) (string, error) { return "", errors.New("cache down") },
			wantStop: true, wantClass: classFailed, wantErr: true, wantReason: addonsv1alpha1.ReasonNotPermitted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got PermitRequest
			permit := tc.permit
			if permit != nil {
				permit = func(ctx context.Context, req PermitRequest) (string, error) {
					got = req
					return tc.permit(ctx, req)
				}
			}
			r, _ := testReconciler(t, Options{Permit: permit})
			st := &reconcileState{addon: coreDNS("a", "x"), channel: "stable", resolved: channels.Resolved{Addon: "coredns", Version: "1.0.0"}}
			out := r.permit(context.Background(), st)
			if out.stop != tc.wantStop || out.class != tc.wantClass || (out.err != nil) != tc.wantErr || out.reason != tc.wantReason {
				t.Fatalf("permit = %+v", out)
			}
			if out.terminal {
				t.Error("a refusal must not be terminal: a policy change reconciles the add-on again")
			}
			if permit != nil && (got.Version != "1.0.0" || got.Channel != "stable") {
				t.Errorf("the policy saw %+v, want the resolved version and channel", got)
			}
		})
	}
}

// rawPatch wraps a JSON patch as spec.patches holds it.
func rawPatch(s string) *runtime.RawExtension { return &runtime.RawExtension{Raw: []byte(s)} }

// TestPermitRequest runs resolve and permit as a reconcile does and checks what the policy
// is asked about: every input that decides what the add-on writes.
func TestPermitRequest(t *testing.T) {
	trustKubeSystem := &Tenancy{TrustedNamespaces: []string{"kube-system"}}
	for _, tc := range []struct {
		name          string
		addon         func(*addonsv1alpha1.CoreDNS)
		defaultTarget string
		tenancy       *Tenancy
		want          PermitRequest
	}{{
		name: "the channel's version",
		want: PermitRequest{Kind: "CoreDNS", Channel: "stable", Version: "1.12.1", Trusted: true, TargetNamespace: "team-a"},
	}, {
		name:  "a pinned version takes no channel, even with spec.channel set",
		addon: func(c *addonsv1alpha1.CoreDNS) { c.Spec.Channel, c.Spec.Version = "stable", "1.14.6" },
		want:  PermitRequest{Kind: "CoreDNS", Version: "1.14.6", Trusted: true, TargetNamespace: "team-a"},
	}, {
		name:    "an untrusted namespace",
		tenancy: trustKubeSystem,
		want:    PermitRequest{Kind: "CoreDNS", Channel: "stable", Version: "1.12.1", TargetNamespace: "team-a"},
	}, {
		name:  "spec.targetNamespace",
		addon: func(c *addonsv1alpha1.CoreDNS) { c.Spec.TargetNamespace = "kube-system" },
		want:  PermitRequest{Kind: "CoreDNS", Channel: "stable", Version: "1.12.1", Trusted: true, TargetNamespace: "kube-system"},
	}, {
		name:          "the definition's default target namespace",
		defaultTarget: "kubernetes-dashboard",
		want:          PermitRequest{Kind: "CoreDNS", Channel: "stable", Version: "1.12.1", Trusted: true, TargetNamespace: "kubernetes-dashboard"},
	}, {
		name: "the kinds spec.patches target",
		addon: func(c *addonsv1alpha1.CoreDNS) {
			c.Spec.Patches = []*runtime.RawExtension{
				rawPatch(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"coredns"}}`),
				rawPatch(`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"system:coredns"}}`),
				rawPatch(`["not an object"]`),
			}
		},
		want: PermitRequest{Kind: "CoreDNS", Channel: "stable", Version: "1.12.1", Trusted: true, TargetNamespace: "team-a",
			PatchKinds: []string{"Deployment", "ClusterRole", ""}},
	}, {
		name:  "a free-form field the definition declares",
		addon: func(c *addonsv1alpha1.CoreDNS) { c.Spec.Corefile = ".:53 {\n  forward . 8.8.8.8\n}\n" },
		want: PermitRequest{Kind: "CoreDNS", Channel: "stable", Version: "1.12.1", Trusted: true, TargetNamespace: "team-a",
			FreeFormFields: []string{"spec.corefile"}},
	}, {
		name:  "declared free-form fields left empty are not set",
		addon: func(c *addonsv1alpha1.CoreDNS) { c.Spec.NodeSelector = map[string]string{} },
		want:  PermitRequest{Kind: "CoreDNS", Channel: "stable", Version: "1.12.1", Trusted: true, TargetNamespace: "team-a"},
	}, {
		name: "several free-form fields, in the definition's order",
		addon: func(c *addonsv1alpha1.CoreDNS) {
			c.Spec.Corefile, c.Spec.NodeSelector = "x", map[string]string{"a": "b"}
		},
		want: PermitRequest{Kind: "CoreDNS", Channel: "stable", Version: "1.12.1", Trusted: true, TargetNamespace: "team-a",
			FreeFormFields: []string{"spec.corefile", "spec.nodeSelector"}},
	}, {
		name: "a failed upgrade rolled back: the version that will be applied",
		addon: func(c *addonsv1alpha1.CoreDNS) {
			c.Spec.Version = "1.14.6"
			c.Status.LastHealthyVersion = "1.12.1"
			c.Status.Upgrade = &addonsv1alpha1.UpgradeStatus{FailedVersion: "1.14.6", FailedGeneration: c.Generation}
		},
		want: PermitRequest{Kind: "CoreDNS", Version: "1.12.1", Trusted: true, TargetNamespace: "team-a"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var got *PermitRequest
			r, _ := testReconciler(t, Options{Permit: func(_ context.Context, req PermitRequest) (string, error) {
				got = &req
				return "", nil
			}})
			r.def.DefaultTargetNamespace = tc.defaultTarget
			// spec.nodeSelector is not free-form; the test declares it to check that the engine
			// reads any declared path, not one it knows.
			r.def.FreeFormFields = []string{"spec.corefile", "spec.nodeSelector", "spec.notAField"}
			addon := coreDNS("team-a", "dns")
			if tc.addon != nil {
				tc.addon(addon)
			}
			st := &reconcileState{addon: addon, settings: Settings{Tenancy: tc.tenancy}}
			if out, at := runPhases(context.Background(), st, phasesBetween(r.phases(), phaseResolve, phasePermit)); out.stop {
				t.Fatalf("%s stopped: %+v", at, out)
			}
			if got == nil {
				t.Fatal("the policy was not asked")
			}
			if got.Addon != addon {
				t.Error("the policy was not given the add-on")
			}
			if diff := cmp.Diff(tc.want, *got, cmpopts.IgnoreFields(PermitRequest{}, "Addon"), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("PermitRequest mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPermitRechecksTheRollbackVersion rolls a failed upgrade back to a version that the
// policy no longer allows: permit refuses it, so nothing is applied.
func TestPermitRechecksTheRollbackVersion(t *testing.T) {
	policies := []configv1alpha1.AddonPolicy{{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kaddons-system", Name: "tenants"},
		Spec: configv1alpha1.AddonPolicySpec{Rules: []configv1alpha1.AddonPolicyRule{{
			Name: "new-dns-only", NamespaceSelector: &metav1.LabelSelector{}, Versions: ">=1.14.0", AllowPatches: ptr.To(false),
		}}},
	}}
	r, _ := testReconciler(t, Options{Permit: func(_ context.Context, req PermitRequest) (string, error) {
		d := policy.Evaluate(policies, policy.Request{Namespace: req.Addon.GetNamespace(), Trusted: req.Trusted, Kind: req.Kind,
			Channel: req.Channel, Version: req.Version, TargetNamespace: req.TargetNamespace})
		if d.Permitted {
			return "", nil
		}
		return d.Message, nil
	}})
	addon := coreDNS("team-a", "dns")
	addon.Spec.Version = "1.14.6"
	st := &reconcileState{addon: addon}
	phases := phasesBetween(r.phases(), phaseResolve, phasePermit)
	if out, at := runPhases(context.Background(), st, phases); out.stop {
		t.Fatalf("the upgrade to 1.14.6 is permitted, but %s stopped: %+v", at, out)
	}

	// The upgrade failed; the last healthy version, 1.12.1, is what a rollback applies.
	addon.Status.LastHealthyVersion = "1.12.1"
	addon.Status.Upgrade = &addonsv1alpha1.UpgradeStatus{FailedVersion: "1.14.6", FailedGeneration: addon.Generation}
	st = &reconcileState{addon: addon}
	out, at := runPhases(context.Background(), st, phases)
	if at != phasePermit || !out.stop || out.class != classStalled || out.reason != addonsv1alpha1.ReasonNotPermitted {
		t.Fatalf("rolling back to 1.12.1: %s returned %+v, want permit to refuse it", at, out)
	}
	if st.resolved.Version != "1.12.1" || st.wanted != "1.14.6" {
		t.Errorf("resolved %s (wanted %s), want the rollback to 1.12.1", st.resolved.Version, st.wanted)
	}
	if want := "does not allow version 1.12.1 (allowed: >=1.14.0)"; !strings.Contains(out.message, want) {
		t.Errorf("message %q does not contain %q", out.message, want)
	}
}

// TestAdmitChecksTheNamespacesOfTheRenderedObjects hands admit rendered objects that
// write to the add-on's own namespace, to a namespace the package pins (kube-system) and
// to a Namespace object of their own: the policy is asked about every one of them, and a
// rule that allows only the add-on's own namespace refuses the add-on, naming the others.
func TestAdmitChecksTheNamespacesOfTheRenderedObjects(t *testing.T) {
	policies := []configv1alpha1.AddonPolicy{{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kaddons-system", Name: "tenants"},
		Spec: configv1alpha1.AddonPolicySpec{Rules: []configv1alpha1.AddonPolicyRule{{
			Name: "own-namespace", NamespaceSelector: &metav1.LabelSelector{},
		}}},
	}}
	var asked []string
	r, _ := testReconciler(t, Options{Permit: func(_ context.Context, req PermitRequest) (string, error) {
		asked = req.ObjectNamespaces
		d := policy.Evaluate(policies, policy.Request{Namespace: req.Addon.GetNamespace(), Kind: req.Kind,
			TargetNamespace: req.TargetNamespace, ObjectNamespaces: req.ObjectNamespaces})
		if d.Permitted {
			return "", nil
		}
		return d.Message, nil
	}})
	object := func(apiVersion, kind, namespace, name string) *Object {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion(apiVersion)
		u.SetKind(kind)
		u.SetNamespace(namespace)
		u.SetName(name)
		o, err := newObject(u)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	for _, tc := range []struct {
		name       string
		objects    []*Object
		want       []string
		wantRefuse string
	}{
		{name: "own namespace only", objects: []*Object{object("v1", "ConfigMap", "team-a", "coredns"),
			object("rbac.authorization.k8s.io/v1", "ClusterRole", "", "coredns-team-a")}, want: []string{"team-a"}},
		{name: "an object pinned to kube-system", objects: []*Object{object("v1", "ConfigMap", "team-a", "coredns"),
			object("v1", "Service", "kube-system", "kube-dns")}, want: []string{"kube-system", "team-a"},
			wantRefuse: "objects in namespace kube-system"},
		{name: "a Namespace object", objects: []*Object{object("v1", "Namespace", "", "elsewhere")},
			want: []string{"elsewhere"}, wantRefuse: "objects in namespace elsewhere"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &reconcileState{addon: coreDNS("team-a", "dns"), resolved: channels.Resolved{Addon: "coredns", Version: "1.12.1"}}
			st.rendered.objects = &Objects{Items: tc.objects}
			out := r.admit(context.Background(), st)
			if diff := cmp.Diff(tc.want, asked); diff != "" {
				t.Errorf("the policy was asked about (-want +got):\n%s", diff)
			}
			if tc.wantRefuse == "" {
				if out.stop {
					t.Fatalf("admit stopped a permitted add-on: %+v", out)
				}
				return
			}
			if !out.stop || out.class != classStalled || out.reason != addonsv1alpha1.ReasonNotPermitted || !strings.Contains(out.message, tc.wantRefuse) {
				t.Fatalf("admit = %+v, want NotPermitted naming %q", out, tc.wantRefuse)
			}
		})
	}
}

// TestSetFieldsSeesPackageValues checks that the Package kind's spec.values, a JSON
// object the policy must allow, counts as set when it holds anything.
func TestSetFieldsSeesPackageValues(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values *apiextensionsv1.JSON
		want   []string
	}{
		{"values", &apiextensionsv1.JSON{Raw: []byte(`{"replicas": 2}`)}, []string{"spec.values"}},
		{"an empty object", &apiextensionsv1.JSON{Raw: []byte(`{}`)}, nil},
		{"none", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &addonsv1alpha1.Package{Spec: addonsv1alpha1.PackageSpec{Package: "demo", Values: tc.values}}
			got, err := setFields(p, []string{"spec.values"})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("setFields = %q, want %q", got, tc.want)
			}
		})
	}
}
