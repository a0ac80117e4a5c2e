package addonsource

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/sources"
)

const operatorNamespace = "kaddons-system"

func TestRequest(t *testing.T) {
	s := runtime.NewScheme()
	if err := corev1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	secret := func(ns, name string, data map[string]string) *corev1.Secret {
		b := map[string][]byte{}
		for k, v := range data {
			b[k] = []byte(v)
		}
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: b}
	}
	reader := fake.NewClientBuilder().WithScheme(s).WithObjects(
		secret(operatorNamespace, "keys", map[string]string{"a.pub": "A", "b.pub": "B", "readme": "x"}),
		secret(operatorNamespace, "nokeys", map[string]string{"readme": "x"}),
		secret(operatorNamespace, "git", map[string]string{"identity": "KEY", "known_hosts": "HOSTS"}),
		secret(operatorNamespace, "basic", map[string]string{"username": "u", "password": "p", "ca.crt": "CA"}),
		secret("tenant", "elsewhere", map[string]string{"a.pub": "A"}),
	).Build()
	ref := func(name string) *addonsv1alpha1.LocalSecretReference {
		return &addonsv1alpha1.LocalSecretReference{Name: name}
	}
	for _, tc := range []struct {
		name       string
		spec       addonsv1alpha1.AddonSourceSpec
		want       sources.Request
		wantReason string
	}{
		{name: "oci with required verification", spec: addonsv1alpha1.AddonSourceSpec{OCI: &addonsv1alpha1.OCISource{
			URL: "registry.example.com/b:v1", Verify: &addonsv1alpha1.OCIVerification{SecretRef: *ref("keys")}}},
			want: sources.Request{Kind: sources.KindOCI, URL: "registry.example.com/b:v1", Timeout: DefaultTimeout,
				Verify: &sources.Verification{PublicKeys: [][]byte{[]byte("A"), []byte("B")}}}},
		{name: "verification not required: unsigned bundles pass, signatures still checked", spec: addonsv1alpha1.AddonSourceSpec{OCI: &addonsv1alpha1.OCISource{
			URL: "r/b:v1", Insecure: true, Verify: &addonsv1alpha1.OCIVerification{SecretRef: *ref("keys"), Required: ptr.To(false)}}},
			want: sources.Request{Kind: sources.KindOCI, URL: "r/b:v1", Timeout: DefaultTimeout, Auth: sources.Auth{Insecure: true},
				Verify: &sources.Verification{PublicKeys: [][]byte{[]byte("A"), []byte("B")}, AllowUnsigned: true}}},
		{name: "insecureLoopback reaches every kind", spec: addonsv1alpha1.AddonSourceSpec{InsecureLoopback: true,
			HTTPS: &addonsv1alpha1.HTTPSSource{URL: "https://127.0.0.1:8443/c.tar.gz", SHA256: strings.Repeat("a", 64)}},
			want: sources.Request{Kind: sources.KindHTTPS, URL: "https://127.0.0.1:8443/c.tar.gz", Digest: "sha256:" + strings.Repeat("a", 64),
				Timeout: DefaultTimeout, Auth: sources.Auth{InsecureLoopback: true}}},
		{name: "oci insecure with insecureLoopback", spec: addonsv1alpha1.AddonSourceSpec{InsecureLoopback: true,
			OCI: &addonsv1alpha1.OCISource{URL: "127.0.0.1:5000/b:v1", Insecure: true}},
			want: sources.Request{Kind: sources.KindOCI, URL: "127.0.0.1:5000/b:v1", Timeout: DefaultTimeout,
				Auth: sources.Auth{Insecure: true, InsecureLoopback: true}}},
		{name: "a key Secret without keys", spec: addonsv1alpha1.AddonSourceSpec{OCI: &addonsv1alpha1.OCISource{
			URL: "r/b:v1", Verify: &addonsv1alpha1.OCIVerification{SecretRef: *ref("nokeys")}}},
			wantReason: sources.ReasonInvalidSource},
		{name: "a Secret outside the operator's namespace is not found", spec: addonsv1alpha1.AddonSourceSpec{OCI: &addonsv1alpha1.OCISource{
			URL: "r/b:v1", Verify: &addonsv1alpha1.OCIVerification{SecretRef: *ref("elsewhere")}}},
			wantReason: sources.ReasonInvalidSource},
		{name: "git over ssh", spec: addonsv1alpha1.AddonSourceSpec{Git: &addonsv1alpha1.GitSource{URL: "ssh://git@h/r",
			Ref: &addonsv1alpha1.GitReference{SemVer: ">=1.0.0"}, Path: "channels", SecretRef: ref("git")}},
			want: sources.Request{Kind: sources.KindGit, URL: "ssh://git@h/r", Git: sources.GitRef{SemVer: ">=1.0.0"}, Path: "channels",
				Timeout: DefaultTimeout, Auth: sources.Auth{SSHPrivateKey: []byte("KEY"), KnownHosts: []byte("HOSTS")}}},
		{name: "https with its digest", spec: addonsv1alpha1.AddonSourceSpec{HTTPS: &addonsv1alpha1.HTTPSSource{URL: "https://h/c.tar.gz",
			SHA256: strings.Repeat("a", 64), SecretRef: ref("basic")}, Timeout: &metav1.Duration{Duration: time.Minute}},
			want: sources.Request{Kind: sources.KindHTTPS, URL: "https://h/c.tar.gz", Digest: "sha256:" + strings.Repeat("a", 64),
				Timeout: time.Minute, Auth: sources.Auth{Username: "u", Password: "p", CA: []byte("CA")}}},
		{name: "directory", spec: addonsv1alpha1.AddonSourceSpec{Directory: &addonsv1alpha1.DirectorySource{Path: "/srv/channels"}},
			want: sources.Request{Kind: sources.KindDirectory, URL: "/srv/channels", Timeout: DefaultTimeout}},
		{name: "a missing Secret", spec: addonsv1alpha1.AddonSourceSpec{Git: &addonsv1alpha1.GitSource{URL: "https://h/r", SecretRef: ref("gone")}},
			wantReason: sources.ReasonInvalidSource},
		{name: "no kind", wantReason: sources.ReasonInvalidSource},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := Request(context.Background(), reader, operatorNamespace, &addonsv1alpha1.AddonSource{Spec: tc.spec})
			switch {
			case tc.wantReason != "" && (err == nil || sources.ReasonOf(err) != tc.wantReason):
				t.Fatalf("error = %v, want reason %s", err, tc.wantReason)
			case tc.wantReason == "" && err != nil:
				t.Fatal(err)
			case tc.wantReason == "" && !equality.Semantic.DeepEqual(req, tc.want):
				t.Errorf("request =\n%+v\nwant\n%+v", req, tc.want)
			}
		})
	}
}

func TestSetStatus(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rev1 := &sources.Artifact{Revision: "v1@sha256:11", Digest: "sha256:11", Metadata: sources.Metadata{OperatorID: "kaddons"}}
	fetched := func() addonsv1alpha1.AddonSourceStatus {
		var s addonsv1alpha1.AddonSourceStatus
		SetStatus(&s, 1, Observation{Artifact: rev1, Now: now})
		return s
	}
	for _, tc := range []struct {
		name         string
		before       addonsv1alpha1.AddonSourceStatus
		obs          Observation
		wantStatus   metav1.ConditionStatus
		wantReason   string
		wantDigest   string
		wantInMessag string
	}{
		{name: "a first fetch", obs: Observation{Artifact: rev1, Now: now},
			wantStatus: metav1.ConditionTrue, wantReason: addonsv1alpha1.ReasonFetched, wantDigest: "sha256:11"},
		{name: "a first fetch that fails", obs: Observation{FetchErr: &sources.Error{Reason: sources.ReasonVerificationFailed, Message: "no signature"}, Now: now},
			wantStatus: metav1.ConditionFalse, wantReason: addonsv1alpha1.ReasonVerificationFailed, wantInMessag: "no signature"},
		{name: "a failure after a fetch keeps the artifact", before: fetched(),
			obs:        Observation{FetchErr: errors.New("dial tcp: connection refused"), Now: now.Add(time.Hour)},
			wantStatus: metav1.ConditionFalse, wantReason: addonsv1alpha1.ReasonFetchFailed, wantDigest: "sha256:11",
			wantInMessag: "add-ons keep using revision v1@sha256:11"},
		{name: "a pre-flight refusal", obs: Observation{Artifact: rev1, Now: now,
			PreflightErr: &sources.Error{Reason: sources.ReasonOperatorTooOld, Message: "needs v9"}},
			wantStatus: metav1.ConditionFalse, wantReason: addonsv1alpha1.ReasonOperatorTooOld, wantDigest: "sha256:11", wantInMessag: "needs v9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.before
			SetStatus(&s, 2, tc.obs)
			c := meta.FindStatusCondition(s.Conditions, addonsv1alpha1.ConditionReady)
			if c == nil || c.Status != tc.wantStatus || c.Reason != tc.wantReason || c.ObservedGeneration != 2 {
				t.Fatalf("Ready = %+v, want %s/%s", c, tc.wantStatus, tc.wantReason)
			}
			if !strings.Contains(c.Message, tc.wantInMessag) {
				t.Errorf("message = %q, want %q in it", c.Message, tc.wantInMessag)
			}
			if s.Digest != tc.wantDigest || s.ObservedGeneration != 2 {
				t.Errorf("digest = %q, observedGeneration = %d", s.Digest, s.ObservedGeneration)
			}
			if tc.wantDigest != "" && (s.LastFetchTime == nil || !s.LastFetchTime.Time.Equal(now)) {
				t.Errorf("lastFetchTime = %v, want %v (the artifact's fetch)", s.LastFetchTime, now)
			}
		})
	}
}
