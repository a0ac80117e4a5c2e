package controllers

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/sources"
)

// fakeFetcher serves, per directory path, the artifact (or the error) a test sets: the
// tests decide when a source has a new revision or goes down. A URL a test delegates is
// fetched by the fetcher it names instead (a real one, against a loopback server).
type fakeFetcher struct {
	mu        sync.Mutex
	results   map[string]fakeResult
	delegates map[string]sources.Fetcher
}

type fakeResult struct {
	artifact *sources.Artifact
	err      error
}

func newFakeFetcher() *fakeFetcher {
	return &fakeFetcher{results: map[string]fakeResult{}, delegates: map[string]sources.Fetcher{}}
}

// Fetch implements sources.Fetcher.
func (f *fakeFetcher) Fetch(ctx context.Context, req sources.Request) (*sources.Artifact, error) {
	f.mu.Lock()
	if d, ok := f.delegates[req.URL]; ok {
		f.mu.Unlock()
		return d.Fetch(ctx, req)
	}
	defer f.mu.Unlock()
	r, ok := f.results[req.URL]
	if !ok {
		return nil, &sources.Error{Reason: sources.ReasonFetchFailed, Message: req.URL + " does not exist"}
	}
	if r.err != nil {
		return nil, r.err
	}
	a := *r.artifact
	return &a, nil
}

// delegate has fetcher fetch url, until the test ends.
func (f *fakeFetcher) delegate(t *testing.T, url string, fetcher sources.Fetcher) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.delegates[url] = fetcher
	t.Cleanup(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(f.delegates, url)
	})
}

func (f *fakeFetcher) serve(url string, artifact *sources.Artifact, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.results[url] = fakeResult{artifact: artifact, err: err}
}

// channelsTree writes a channels tree whose stable channel lists coredns at version, with
// the suite's CoreDNS packages, and returns its directory.
func channelsTree(t *testing.T, version string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(filepath.Join(dir, "packages", "coredns"), os.DirFS(filepath.Join(source.Dir(), "packages", "coredns"))); err != nil {
		t.Fatal(err)
	}
	channel := "manifests:\n- name: coredns\n  version: " + version + "\n"
	if err := os.WriteFile(filepath.Join(dir, "stable"), []byte(channel), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// newAddonSource creates a directory AddonSource named after ns, served by testFetcher at
// a path of its own, whose packages are applied with the operator's own identity, and
// deletes it afterwards.
func newAddonSource(t *testing.T, ns string) *addonsv1alpha1.AddonSource {
	t.Helper()
	return newAddonSourceWith(t, ns, func(spec *addonsv1alpha1.AddonSourceSpec) { spec.ApplyAsOperator = true })
}

// newAddonSourceWith creates a directory AddonSource named after ns, served by testFetcher
// at a path of its own, with change made to its spec, and deletes it afterwards.
func newAddonSourceWith(t *testing.T, ns string, change func(*addonsv1alpha1.AddonSourceSpec)) *addonsv1alpha1.AddonSource {
	t.Helper()
	src := &addonsv1alpha1.AddonSource{
		ObjectMeta: metav1.ObjectMeta{Name: ns},
		Spec:       addonsv1alpha1.AddonSourceSpec{Directory: &addonsv1alpha1.DirectorySource{Path: "/fake/" + ns}},
	}
	change(&src.Spec)
	NewWithT(t).Expect(k8sClient.Create(context.Background(), src)).To(Succeed())
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), src) })
	return src
}

// refetch changes the source's timeout, a new generation, so it is fetched at once.
func refetch(t *testing.T, src *addonsv1alpha1.AddonSource, timeout string) {
	t.Helper()
	g := NewWithT(t)
	g.Expect(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(src), src)).To(Succeed())
	d, err := time.ParseDuration(timeout)
	g.Expect(err).NotTo(HaveOccurred())
	// A merge patch, not an update: the controller may write the source (its finalizer,
	// its status) between the read and the write, and an update would then conflict.
	before := src.DeepCopy()
	src.Spec.Timeout = &metav1.Duration{Duration: d}
	g.Expect(k8sClient.Patch(context.Background(), src, client.MergeFrom(before))).To(Succeed())
}

// waitSource waits until the AddonSource's Ready condition has reason for its generation
// and returns the source.
func waitSource(t *testing.T, src *addonsv1alpha1.AddonSource, reason string) *addonsv1alpha1.AddonSource {
	t.Helper()
	return waitSourceWith(t, src, reason, "")
}

// waitSourceWith waits until the AddonSource's Ready condition has reason for its
// generation and, unless digest is empty, its status that digest; it returns the source.
func waitSourceWith(t *testing.T, src *addonsv1alpha1.AddonSource, reason, digest string) *addonsv1alpha1.AddonSource {
	t.Helper()
	got := &addonsv1alpha1.AddonSource{}
	NewWithT(t).Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(src), got)).To(Succeed())
		ready := meta.FindStatusCondition(got.Status.Conditions, addonsv1alpha1.ConditionReady)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.ObservedGeneration).To(Equal(got.Generation))
		g.Expect(ready.Reason).To(Equal(reason), "Ready: %s", ready.Message)
		if digest != "" {
			g.Expect(got.Status.Digest).To(Equal(digest))
		}
	}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())
	return got
}

// waitSourceApplied waits until the add-on applied version from the source's digest.
func waitSourceApplied(t *testing.T, cr *addonsv1alpha1.CoreDNS, name, revision, digest, version string) {
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) {
		getAddon(g, cr)
		g.Expect(cr.Status.AppliedVersion).To(Equal(version))
		g.Expect(cr.Status.Source).To(Equal(&addonsv1alpha1.AppliedSource{Name: name, Revision: revision, Digest: digest}))
	}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())
}

// childState is the UID and resourceVersion of every child in an inventory.
func childState(t *testing.T, cr *addonsv1alpha1.CoreDNS) map[string]string {
	t.Helper()
	state := map[string]string{}
	for _, ref := range cr.Status.Inventory.Objects() {
		live, err := liveObject(ref)
		if err != nil {
			t.Fatalf("reading %s: %v", ref, err)
		}
		state[ref.String()] = string(live.GetUID()) + "/" + live.GetResourceVersion()
	}
	return state
}

// TestAddonSource: add-ons with spec.sourceRef apply the source's packages and record its
// revision and digest; a new revision rolls out to every add-on that uses it; a source
// that goes down keeps its last artifact; a pre-flight refusal changes no child.
func TestAddonSource(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	nsA, nsB := newNamespace(t), newNamespace(t)
	src := newAddonSource(t, nsA)
	url := src.Spec.Directory.Path
	rev1 := &sources.Artifact{Revision: "rev1", Digest: "sha256:" + repeat("1"), Dir: channelsTree(t, oldVersion)}
	rev2 := &sources.Artifact{Revision: "rev2", Digest: "sha256:" + repeat("2"), Dir: channelsTree(t, newVersion)}

	// Before the source has an artifact, an add-on that names it waits: nothing applied.
	addons := make([]*addonsv1alpha1.CoreDNS, 0, 2)
	for _, ns := range []string{nsA, nsB} {
		cr := &addonsv1alpha1.CoreDNS{ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: ns}}
		cr.Spec.Channel = "stable"
		cr.Spec.SourceRef = src.Name
		g.Expect(k8sClient.Create(ctx, cr)).To(Succeed())
		addons = append(addons, cr)
	}
	ready := waitReason(t, addons[0], addonsv1alpha1.ReasonSourceNotReady)
	g.Expect(ready.Message).To(ContainSubstring(src.Name))
	g.Expect(addons[0].Status.Inventory.Objects()).To(BeEmpty())

	t.Run("the first revision is applied and recorded", func(t *testing.T) {
		testFetcher.serve(url, rev1, nil)
		refetch(t, src, "30s")
		got := waitSource(t, src, addonsv1alpha1.ReasonFetched)
		NewWithT(t).Expect(got.Status.Revision).To(Equal("rev1"))
		NewWithT(t).Expect(got.Status.Digest).To(Equal(rev1.Digest))
		NewWithT(t).Expect(got.Status.LastFetchTime).NotTo(BeNil())
		for _, cr := range addons {
			waitSourceApplied(t, cr, src.Name, "rev1", rev1.Digest, oldVersion)
		}
		markWorkloadsAvailable(t, nsA)
		waitReason(t, addons[0], addonsv1alpha1.ReasonReconciled)
	})

	t.Run("a new revision rolls out to every add-on that uses it", func(t *testing.T) {
		testFetcher.serve(url, rev2, nil)
		refetch(t, src, "31s")
		waitSource(t, src, addonsv1alpha1.ReasonFetched)
		for _, cr := range addons {
			waitSourceApplied(t, cr, src.Name, "rev2", rev2.Digest, newVersion)
		}
	})

	t.Run("a source that goes down keeps its last artifact", func(t *testing.T) {
		cr := addons[1]
		getAddon(NewWithT(t), cr)
		before := childState(t, cr)
		testFetcher.serve(url, nil, &sources.Error{Reason: sources.ReasonFetchFailed, Message: "connection refused"})
		refetch(t, src, "32s")
		got := waitSource(t, src, addonsv1alpha1.ReasonFetchFailed)
		NewWithT(t).Expect(got.Status.Revision).To(Equal("rev2"))
		NewWithT(t).Expect(got.Status.Digest).To(Equal(rev2.Digest))
		ready := meta.FindStatusCondition(got.Status.Conditions, addonsv1alpha1.ConditionReady)
		NewWithT(t).Expect(ready.Message).To(ContainSubstring("add-ons keep using revision rev2"))
		// A reconcile of the add-on (a new generation) still uses the last artifact, and
		// changes no child.
		setUpgradeTimeout(t, cr, "7m")
		waitApplied(t, cr, newVersion)
		waitSourceApplied(t, cr, src.Name, "rev2", rev2.Digest, newVersion)
		NewWithT(t).Expect(childState(t, cr)).To(Equal(before))
	})

	t.Run("a pre-flight refusal applies and prunes nothing", func(t *testing.T) {
		for i, tc := range []struct {
			metadata sources.Metadata
			reason   string
		}{
			{sources.Metadata{MinOperatorVersion: "v9.0.0"}, addonsv1alpha1.ReasonOperatorTooOld},
			{sources.Metadata{OperatorID: "someone-else"}, addonsv1alpha1.ReasonOperatorMismatch},
			{sources.Metadata{KubernetesVersions: "< 1.0.0"}, addonsv1alpha1.ReasonKubernetesVersionUnsupported},
		} {
			t.Run(tc.reason, func(t *testing.T) {
				cr := addons[1]
				getAddon(NewWithT(t), cr)
				before := childState(t, cr)
				// The refused revision lists the old version: applying it would change children.
				refusedRev := &sources.Artifact{Revision: "refused-" + tc.reason, Digest: "sha256:" + repeat(string(rune('a'+i))),
					Dir: rev1.Dir, Metadata: tc.metadata}
				testFetcher.serve(url, refusedRev, nil)
				refetch(t, src, "33s")
				waitSource(t, src, tc.reason)
				ready := waitReason(t, cr, tc.reason)
				NewWithT(t).Expect(ready.Message).To(ContainSubstring("AddonSource " + src.Name))
				NewWithT(t).Expect(cr.Status.AppliedVersion).To(Equal(newVersion))
				NewWithT(t).Expect(cr.Status.Source.Digest).To(Equal(rev2.Digest))
				NewWithT(t).Expect(childState(t, cr)).To(Equal(before))
				// Back to a revision the operator accepts.
				testFetcher.serve(url, rev2, nil)
				refetch(t, src, "34s")
				waitSource(t, src, addonsv1alpha1.ReasonFetched)
				waitSourceApplied(t, cr, src.Name, "rev2", rev2.Digest, newVersion)
			})
		}
	})

	t.Run("a deleted source stops its add-ons without pruning", func(t *testing.T) {
		cr := addons[1]
		getAddon(NewWithT(t), cr)
		before := childState(t, cr)
		NewWithT(t).Expect(k8sClient.Delete(ctx, src)).To(Succeed())
		waitReason(t, cr, addonsv1alpha1.ReasonSourceNotReady)
		NewWithT(t).Expect(childState(t, cr)).To(Equal(before))
	})
}

// setUpgradeTimeout changes the add-on's spec.upgrade.timeout, a new generation that
// renders the same objects.
func setUpgradeTimeout(t *testing.T, cr *addonsv1alpha1.CoreDNS, timeout string) {
	t.Helper()
	g := NewWithT(t)
	d, err := time.ParseDuration(timeout)
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() error {
		if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(cr), cr); err != nil {
			return err
		}
		cr.Spec.Upgrade = &addonsv1alpha1.UpgradeSpec{Timeout: &metav1.Duration{Duration: d}}
		return k8sClient.Update(context.Background(), cr)
	}).WithTimeout(eventuallyTimeout).Should(Succeed())
}

// repeat returns 64 copies of the hex digit s: a digest for a fake artifact.
func repeat(s string) string { return strings.Repeat(s, 64) }

// TestAddonSourceValidation: the API server refuses an AddonSource that sets no kind or
// two, an https source without its digest, a git path that leaves the repository, and a
// URL that carries credentials.
func TestAddonSourceValidation(t *testing.T) {
	dir := &addonsv1alpha1.DirectorySource{Path: "/srv/channels"}
	oci := &addonsv1alpha1.OCISource{URL: "registry.example.com/b:v1"}
	for _, tc := range []struct {
		name    string
		spec    addonsv1alpha1.AddonSourceSpec
		wantErr string
	}{
		{name: "directory", spec: addonsv1alpha1.AddonSourceSpec{Directory: dir}},
		{name: "none", wantErr: "set exactly one of oci, git, https and directory"},
		{name: "two", spec: addonsv1alpha1.AddonSourceSpec{Directory: dir, OCI: oci}, wantErr: "set exactly one of oci, git, https and directory"},
		{name: "https without sha256", spec: addonsv1alpha1.AddonSourceSpec{HTTPS: &addonsv1alpha1.HTTPSSource{URL: "https://h/c.tar.gz"}},
			wantErr: "spec.https.sha256"},
		{name: "plain http", spec: addonsv1alpha1.AddonSourceSpec{HTTPS: &addonsv1alpha1.HTTPSSource{URL: "http://h/c.tar.gz",
			SHA256: strings.Repeat("a", 64)}}, wantErr: "url must be an https:// URL"},
		{name: "git path outside the repository", spec: addonsv1alpha1.AddonSourceSpec{Git: &addonsv1alpha1.GitSource{URL: "https://h/r",
			Path: "channels/../../etc"}}, wantErr: "path must be relative and stay inside the repository"},
		{name: "relative directory", spec: addonsv1alpha1.AddonSourceSpec{Directory: &addonsv1alpha1.DirectorySource{Path: "srv"}},
			wantErr: "path must be absolute"},
		{name: "insecureLoopback", spec: addonsv1alpha1.AddonSourceSpec{InsecureLoopback: true,
			OCI: &addonsv1alpha1.OCISource{URL: "127.0.0.1:5000/b:v1", Insecure: true}}},
		{name: "https with user and password", spec: addonsv1alpha1.AddonSourceSpec{HTTPS: &addonsv1alpha1.HTTPSSource{
			URL: "https://user:s3cret@h/c.tar.gz", SHA256: strings.Repeat("a", 64)}}, wantErr: "url must not carry credentials"},
		{name: "https with a token as the user", spec: addonsv1alpha1.AddonSourceSpec{HTTPS: &addonsv1alpha1.HTTPSSource{
			URL: "https://t0ken@h/c.tar.gz", SHA256: strings.Repeat("a", 64)}}, wantErr: "url must not carry credentials"},
		{name: "https with @ in the path", spec: addonsv1alpha1.AddonSourceSpec{HTTPS: &addonsv1alpha1.HTTPSSource{
			URL: "https://h/pkg@v1.tar.gz", SHA256: strings.Repeat("a", 64)}}},
		{name: "git over https with a token", spec: addonsv1alpha1.AddonSourceSpec{Git: &addonsv1alpha1.GitSource{
			URL: "https://x-access-token:s3cret@github.com/o/r.git"}}, wantErr: "url must not carry credentials"},
		{name: "git over ssh with a password", spec: addonsv1alpha1.AddonSourceSpec{Git: &addonsv1alpha1.GitSource{
			URL: "ssh://git:s3cret@h/r.git"}}, wantErr: "url must not carry credentials"},
		{name: "git over ssh with its user", spec: addonsv1alpha1.AddonSourceSpec{Git: &addonsv1alpha1.GitSource{URL: "ssh://git@h:2222/r.git"}}},
		{name: "git, scp-like", spec: addonsv1alpha1.AddonSourceSpec{Git: &addonsv1alpha1.GitSource{URL: "git@github.com:o/r.git"}}},
		{name: "oci with user and password", spec: addonsv1alpha1.AddonSourceSpec{OCI: &addonsv1alpha1.OCISource{
			URL: "oci://puller:s3cret@registry.example.com/b:v1"}}, wantErr: "url must not carry credentials"},
		{name: "oci by digest, with a port", spec: addonsv1alpha1.AddonSourceSpec{OCI: &addonsv1alpha1.OCISource{
			URL: "registry.example.com:5000/b@sha256:" + strings.Repeat("a", 64)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := &addonsv1alpha1.AddonSource{ObjectMeta: metav1.ObjectMeta{GenerateName: "validation-"}, Spec: tc.spec}
			err := k8sClient.Create(context.Background(), src)
			if err == nil {
				t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), src) })
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// TestSourcePackagesGetOnlyWhatTheSourceWasGranted has an add-on in a trusted namespace,
// which the operator would apply with its own identity, use an AddonSource. A source that
// names no identity is refused (SourceNotTrusted). A source that names a ServiceAccount of
// the operator's namespace allowed to write only ConfigMaps gets no more: the package's
// ClusterRole, Deployment and the rest are refused by RBAC (Forbidden), and nothing is
// written. Neither the package nor the add-on's author gains the operator's power.
func TestSourcePackagesGetOnlyWhatTheSourceWasGranted(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	artifact := &sources.Artifact{Revision: "rev1", Digest: "sha256:" + repeat("7"), Dir: channelsTree(t, newVersion)}

	testFetcher.serve("/fake/"+ns, artifact, nil)
	anonymous := newAddonSourceWith(t, ns, func(*addonsv1alpha1.AddonSourceSpec) {})
	cr := &addonsv1alpha1.CoreDNS{ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: ns}}
	cr.Spec.Version, cr.Spec.SourceRef = newVersion, anonymous.Name
	g.Expect(k8sClient.Create(ctx, cr)).To(Succeed())
	ready := waitReason(t, cr, addonsv1alpha1.ReasonSourceNotTrusted)
	g.Expect(ready.Message).To(ContainSubstring("AddonSource " + anonymous.Name + " names no identity"))
	g.Expect(cr.Status.Inventory.Objects()).To(BeEmpty())

	// The source names a ServiceAccount of the operator's namespace that may write
	// ConfigMaps only.
	account := "source-" + ns
	g.Expect(k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: policyNamespace}})).To(Or(Succeed(), WithTransform(apierrors.IsAlreadyExists, BeTrue())))
	g.Expect(k8sClient.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: policyNamespace, Name: account}})).To(Succeed())
	g.Expect(k8sClient.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: account},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"},
			Verbs: []string{"get", "list", "watch", "create", "patch", "delete"}}}})).To(Succeed())
	g.Expect(k8sClient.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: account},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: account},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: policyNamespace, Name: account}}})).To(Succeed())
	g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(anonymous), anonymous)).To(Succeed())
	before := anonymous.DeepCopy()
	anonymous.Spec.ServiceAccountName = account
	g.Expect(k8sClient.Patch(ctx, anonymous, client.MergeFrom(before))).To(Succeed())
	ready = waitReason(t, cr, addonsv1alpha1.ReasonForbidden)
	g.Expect(ready.Message).To(ContainSubstring("ServiceAccount " + policyNamespace + "/" + account + " may not"))
	g.Expect(ready.Message).To(ContainSubstring("ClusterRole"))
	g.Expect(cr.Status.Inventory.Objects()).To(BeEmpty())
	deployments := &appsv1.DeploymentList{}
	g.Expect(k8sClient.List(ctx, deployments, client.InNamespace(ns))).To(Succeed())
	g.Expect(deployments.Items).To(BeEmpty(), "nothing was written")
}
