package kubeadm_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/coredns/corefile-migration/migration"
	"github.com/coredns/corefile-migration/migration/corefile"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kaddons/kaddons/test/kubeadm"
)

var files = []string{kubeadm.Plain, kubeadm.Custom, kubeadm.RemovedPlugin}

// The flags hack/kubeadm-manifests.sh passes: a default kubeadm cluster.
const (
	serviceCIDR = "10.96.0.0/12"
	dnsIP       = "10.96.0.10" // the tenth address of serviceCIDR, as kubeadm's GetDNSIP computes it
	dnsDomain   = "cluster.local"
)

func load(t *testing.T, name string) []client.Object {
	t.Helper()
	objs, err := kubeadm.Load(name)
	if err != nil {
		t.Fatalf("Load(%s): %v", name, err)
	}
	return objs
}

func corefileOf(t *testing.T, name string) string {
	t.Helper()
	cf, err := kubeadm.Corefile(load(t, name))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return cf
}

func parse(t *testing.T, s string) *corefile.Corefile {
	t.Helper()
	cf, err := corefile.New(s)
	if err != nil {
		t.Fatalf("parse Corefile: %v\n%s", err, s)
	}
	return cf
}

func server(cf *corefile.Corefile, domPorts ...string) *corefile.Server {
	for _, s := range cf.Servers {
		if slices.Equal(s.DomPorts, domPorts) {
			return s
		}
	}
	return nil
}

func pluginStrings(s *corefile.Server) []string {
	if s == nil {
		return nil
	}
	out := make([]string, 0, len(s.Plugins))
	for _, p := range s.Plugins {
		out = append(out, p.ToString())
	}
	return out
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := kubeadm.Dir()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "..", "..", "..")
}

// pinnedKubernetes is the k8s.io/kubernetes version hack/tools/kube pins: the kubeadm
// that must have rendered the files.
func pinnedKubernetes(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(moduleRoot(t), "hack", "tools", "kube", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^require k8s\.io/kubernetes (v\S+)(?: // indirect)?$`).FindSubmatch(data)
	if m == nil {
		t.Fatal("hack/tools/kube/go.mod does not require k8s.io/kubernetes")
	}
	return string(m[1])
}

// TestObjectsAreKubeadms checks that every file holds exactly the objects kubeadm creates
// for CoreDNS, wired as kubeadm wires them, from the pinned kubeadm with a default
// cluster's flags.
func TestObjectsAreKubeadms(t *testing.T) {
	k8sVersion := pinnedKubernetes(t)
	for _, name := range files {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			objs := load(t, name)

			type key struct{ kind, namespace, name string }
			var got []key
			for _, obj := range objs {
				got = append(got, key{typeName(obj), obj.GetNamespace(), obj.GetName()})
			}
			g.Expect(got).To(ConsistOf(
				key{"Deployment", kubeadm.Namespace, kubeadm.DeploymentName},
				key{"ConfigMap", kubeadm.Namespace, kubeadm.ConfigMapName},
				key{"Service", kubeadm.Namespace, kubeadm.ServiceName},
				key{"ServiceAccount", kubeadm.Namespace, kubeadm.ServiceAccount},
				key{"ClusterRole", "", kubeadm.ClusterRoleName},
				key{"ClusterRoleBinding", "", kubeadm.ClusterRoleName},
			))

			deploy := kubeadm.Find[*appsv1.Deployment](objs, kubeadm.Namespace, kubeadm.DeploymentName)
			cm := kubeadm.Find[*corev1.ConfigMap](objs, kubeadm.Namespace, kubeadm.ConfigMapName)
			svc := kubeadm.Find[*corev1.Service](objs, kubeadm.Namespace, kubeadm.ServiceName)
			role := kubeadm.Find[*rbacv1.ClusterRole](objs, "", kubeadm.ClusterRoleName)
			binding := kubeadm.Find[*rbacv1.ClusterRoleBinding](objs, "", kubeadm.ClusterRoleName)

			version, err := kubeadm.CoreDNSVersion(objs)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(migration.ValidVersions()).To(ContainElement(version),
				"corefile-migration does not know kubeadm's CoreDNS version")
			t.Logf("kubeadm %s deploys %s:v%s", k8sVersion, kubeadm.Image, version)

			// The Deployment runs as the ServiceAccount and mounts the Corefile of the ConfigMap.
			pod := deploy.Spec.Template.Spec
			g.Expect(pod.ServiceAccountName).To(Equal(kubeadm.ServiceAccount))
			g.Expect(pod.Volumes).To(ContainElement(WithTransform(func(v corev1.Volume) []string {
				if v.ConfigMap == nil || v.ConfigMap.Name != kubeadm.ConfigMapName {
					return nil
				}
				var keys []string
				for _, item := range v.ConfigMap.Items {
					keys = append(keys, item.Key)
				}
				return keys
			}, Equal([]string{kubeadm.CorefileKey}))))
			g.Expect(cm.Data).To(HaveKey(kubeadm.CorefileKey))

			// The Service is kube-dns on the DNS IP of the service CIDR, in front of the pods.
			g.Expect(svc.Spec.ClusterIP).To(Equal(dnsIP), "kube-dns is not on the DNS IP of %s", serviceCIDR)
			g.Expect(svc.Spec.Selector).NotTo(BeEmpty())
			for k, v := range svc.Spec.Selector {
				g.Expect(deploy.Spec.Template.Labels).To(HaveKeyWithValue(k, v))
			}

			// The binding gives the ClusterRole to the ServiceAccount; the role lets the
			// kubernetes plugin watch services and endpoint slices.
			g.Expect(binding.RoleRef).To(Equal(rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name}))
			g.Expect(binding.Subjects).To(ConsistOf(rbacv1.Subject{
				Kind: rbacv1.ServiceAccountKind, Name: kubeadm.ServiceAccount, Namespace: kubeadm.Namespace}))
			for _, gr := range [][2]string{{"", "services"}, {"discovery.k8s.io", "endpointslices"}} {
				for _, verb := range []string{"list", "watch"} {
					g.Expect(allows(role, gr[0], gr[1], verb)).To(BeTrue(), "%s may not %s %s", role.Name, verb, gr[1])
				}
			}

			// The Corefile serves the cluster domain of the flags.
			main := server(parse(t, cm.Data[kubeadm.CorefileKey]), ".:53")
			g.Expect(main).NotTo(BeNil(), "no .:53 server block")
			g.Expect(pluginStrings(main)).To(ContainElement(HavePrefix("kubernetes "+dnsDomain+" ")),
				"the Corefile does not serve %s", dnsDomain)

			// The header names the command and the pinned kubeadm.
			dir, err := kubeadm.Dir()
			g.Expect(err).NotTo(HaveOccurred())
			data, err := os.ReadFile(filepath.Join(dir, name))
			g.Expect(err).NotTo(HaveOccurred())
			header, _, found := strings.Cut(string(data), "\n---")
			g.Expect(found).To(BeTrue(), "no document separator after the header")
			g.Expect(header).To(ContainSubstring("kubeadm " + k8sVersion))
			g.Expect(header).To(ContainSubstring("kubeadm init phase addon coredns --print-manifest --kubernetes-version " + k8sVersion +
				" --service-cidr " + serviceCIDR + " --service-dns-domain " + dnsDomain))
		})
	}
}

func allows(role *rbacv1.ClusterRole, group, resource, verb string) bool {
	for _, r := range role.Rules {
		if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) {
			return true
		}
	}
	return false
}

func typeName(obj client.Object) string {
	switch obj.(type) {
	case *appsv1.Deployment:
		return "Deployment"
	case *corev1.ConfigMap:
		return "ConfigMap"
	case *corev1.Service:
		return "Service"
	case *corev1.ServiceAccount:
		return "ServiceAccount"
	case *rbacv1.ClusterRole:
		return "ClusterRole"
	case *rbacv1.ClusterRoleBinding:
		return "ClusterRoleBinding"
	}
	return obj.GetObjectKind().GroupVersionKind().Kind + "?"
}

// TestVariantsDifferOnlyInTheCorefile checks that the customised files are kubeadm's
// objects with nothing but the admin's Corefile edits.
func TestVariantsDifferOnlyInTheCorefile(t *testing.T) {
	plain := load(t, kubeadm.Plain)
	for _, name := range []string{kubeadm.Custom, kubeadm.RemovedPlugin} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			variant := load(t, name)
			g.Expect(variant).To(HaveLen(len(plain)))
			for i := range plain {
				want := plain[i].DeepCopyObject().(client.Object)
				if cm, ok := want.(*corev1.ConfigMap); ok {
					g.Expect(cm.Name).To(Equal(kubeadm.ConfigMapName))
					got := variant[i].(*corev1.ConfigMap)
					g.Expect(got.Data[kubeadm.CorefileKey]).NotTo(Equal(cm.Data[kubeadm.CorefileKey]))
					cm.Data[kubeadm.CorefileKey] = got.Data[kubeadm.CorefileKey]
				}
				g.Expect(equality.Semantic.DeepEqual(variant[i], want)).To(BeTrue(),
					"%s %s differs from kubeadm's beyond the Corefile", typeName(want), want.GetName())
			}
		})
	}

	g := NewWithT(t)
	plainCf := parse(t, corefileOf(t, kubeadm.Plain))
	customCf := parse(t, corefileOf(t, kubeadm.Custom))
	removedCf := parse(t, corefileOf(t, kubeadm.RemovedPlugin))

	// Custom: the .:53 server gains a hosts block, and a stub-domain server follows.
	g.Expect(customCf.Servers).To(HaveLen(len(plainCf.Servers) + 1))
	plainMain, customMain := server(plainCf, ".:53"), server(customCf, ".:53")
	g.Expect(pluginStrings(customMain)).To(Equal(append(pluginStrings(plainMain), (&corefile.Plugin{
		Name: "hosts",
		Options: []*corefile.Option{
			{Name: "10.0.0.1", Args: []string{"example.internal"}},
			{Name: "fallthrough"},
		},
	}).ToString())))
	stub := server(customCf, "example.internal:53")
	g.Expect(stub).NotTo(BeNil())
	g.Expect(pluginStrings(stub)).To(Equal([]string{"forward . 10.0.0.53"}))

	// Removed plugin: the same, but the stub-domain server uses proxy instead of forward.
	g.Expect(pluginStrings(server(removedCf, ".:53"))).To(Equal(pluginStrings(customMain)))
	g.Expect(removedCf.Servers).To(HaveLen(len(customCf.Servers)))
	g.Expect(pluginStrings(server(removedCf, "example.internal:53"))).To(Equal([]string{"proxy . 10.0.0.53"}))
}

// customBlocks returns the plugins (as "<server>/<plugin>") that the Custom Corefile has
// and kubeadm's has not: what a migration must keep.
func customBlocks(t *testing.T, plain, custom string) []string {
	t.Helper()
	have := map[string]bool{}
	for _, s := range parse(t, plain).Servers {
		for _, p := range pluginStrings(s) {
			have[strings.Join(s.DomPorts, " ")+"/"+p] = true
		}
	}
	var out []string
	for _, s := range parse(t, custom).Servers {
		for _, p := range pluginStrings(s) {
			if k := strings.Join(s.DomPorts, " ") + "/" + p; !have[k] {
				out = append(out, k)
			}
		}
	}
	return out
}

func blocks(t *testing.T, s string) []string {
	t.Helper()
	var out []string
	for _, srv := range parse(t, s).Servers {
		for _, p := range pluginStrings(srv) {
			out = append(out, strings.Join(srv.DomPorts, " ")+"/"+p)
		}
	}
	return out
}

// channelVersions lists the CoreDNS versions kaddons ships, in the order corefile-migration
// sorts versions.
func channelVersions(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(moduleRoot(t), "channels", "packages", "coredns"))
	if err != nil {
		t.Fatal(err)
	}
	var shipped []string
	for _, e := range entries {
		if e.IsDir() {
			shipped = append(shipped, e.Name())
		}
	}
	var out []string
	for _, v := range migration.ValidVersions() {
		if slices.Contains(shipped, v) {
			out = append(out, v)
		}
	}
	if len(out) != len(shipped) || len(out) == 0 {
		t.Fatalf("corefile-migration knows %v of the shipped CoreDNS versions %v", out, shipped)
	}
	return out
}

// prior returns the version before v in corefile-migration's data.
func prior(t *testing.T, v string) string {
	t.Helper()
	all := migration.ValidVersions()
	i := slices.Index(all, v)
	if i < 1 {
		t.Fatalf("no version before %s in corefile-migration", v)
	}
	return all[i-1]
}

func notices(ns []migration.Notice) []string {
	out := make([]string, 0, len(ns))
	for _, n := range ns {
		out = append(out, n.ToString())
	}
	return out
}

func plugins(ns []migration.Notice, plugin string) []migration.Notice {
	var out []migration.Notice
	for _, n := range ns {
		if n.Plugin == plugin {
			out = append(out, n)
		}
	}
	return out
}

// TestCorefileMigration migrates the admin's Corefile with corefile-migration's calls as
// kubeadm makes them (cmd/kubeadm/app/phases/addons/dns/dns.go, migrateCoreDNSCorefile and
// isCoreDNSConfigMapMigrationRequired; cmd/kubeadm/app/phases/upgrade/preflight.go,
// checkUnsupportedPlugins and checkMigration) between kubeadm's CoreDNS version and every
// version kaddons ships.
func TestCorefileMigration(t *testing.T) {
	kubeadmVersion, err := kubeadm.CoreDNSVersion(load(t, kubeadm.Plain))
	if err != nil {
		t.Fatal(err)
	}
	plain := corefileOf(t, kubeadm.Plain)
	custom := corefileOf(t, kubeadm.Custom)
	keep := customBlocks(t, plain, custom)
	if len(keep) != 2 {
		t.Fatalf("the custom Corefile adds %v to kubeadm's, want the hosts block and the stub-domain server", keep)
	}
	t.Logf("kubeadm's CoreDNS %s; kaddons ships %v; migration.Default(\"\", kubeadm's Corefile) = %v",
		kubeadmVersion, channelVersions(t), migration.Default("", plain))

	for _, target := range channelVersions(t) {
		t.Run("from kubeadm to "+target, func(t *testing.T) {
			g := NewWithT(t)
			out, err := migration.Migrate(kubeadmVersion, target, custom, false)
			if migration.ValidUpMigration(kubeadmVersion, target) == nil {
				g.Expect(err).NotTo(HaveOccurred())
				deprecated, err := migration.Deprecated(kubeadmVersion, target, custom)
				g.Expect(err).NotTo(HaveOccurred())
				t.Logf("Migrate(%q, %q, custom, false): ok; Deprecated: %v", kubeadmVersion, target, notices(deprecated))
			} else {
				// corefile-migration migrates only upwards: kubeadm's calls refuse a target
				// older than kubeadm's CoreDNS, whatever the Corefile holds.
				g.Expect(err).To(HaveOccurred())
				_, plainErr := migration.Migrate(kubeadmVersion, target, plain, false)
				g.Expect(plainErr).To(MatchError(err.Error()))
				_, depErr := migration.Deprecated(kubeadmVersion, target, custom)
				g.Expect(depErr).To(MatchError(err.Error()))
				t.Logf("Migrate(%q, %q, custom, false): %v (the same for kubeadm's own Corefile)", kubeadmVersion, target, err)
				out, err = migration.MigrateDown(kubeadmVersion, target, custom)
				g.Expect(err).NotTo(HaveOccurred())
				t.Logf("MigrateDown(%q, %q, custom): ok", kubeadmVersion, target)
			}
			g.Expect(blocks(t, out)).To(ContainElements(keep), "the migrated Corefile lost the admin's blocks:\n%s", out)
		})

		// The way kubeadm upgrades: from the CoreDNS running (here kaddons' version) to kubeadm's.
		t.Run("from "+target+" to kubeadm", func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(migration.ValidUpMigration(target, kubeadmVersion)).To(Succeed())
			deprecated, err := migration.Deprecated(target, kubeadmVersion, custom)
			g.Expect(err).NotTo(HaveOccurred())
			for _, n := range deprecated {
				g.Expect(n.Severity).NotTo(BeElementOf(migration.SevDeprecated, migration.SevRemoved, migration.SevIgnored),
					"a plugin of the custom Corefile changed between %s and %s: %s", target, kubeadmVersion, n.ToString())
			}
			unsupported, err := migration.Unsupported(target, kubeadmVersion, custom)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(unsupported).To(BeEmpty())
			out, err := migration.Migrate(target, kubeadmVersion, custom, false)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(blocks(t, out)).To(ContainElements(keep), "the migrated Corefile lost the admin's blocks:\n%s", out)
			t.Logf("Migrate(%q, %q, custom, false): ok; Deprecated: %v", target, kubeadmVersion, notices(deprecated))
		})
	}

	// Upwards from kubeadm's version, to every later version corefile-migration knows.
	all := migration.ValidVersions()
	for _, target := range all[slices.Index(all, kubeadmVersion)+1:] {
		t.Run("from kubeadm up to "+target, func(t *testing.T) {
			g := NewWithT(t)
			out, err := migration.Migrate(kubeadmVersion, target, custom, false)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(blocks(t, out)).To(ContainElements(keep), "the migrated Corefile lost the admin's blocks:\n%s", out)
		})
	}
}

// TestRemovedPlugin shows how corefile-migration reports the proxy plugin of the
// RemovedPlugin Corefile: which calls name it and which pass it through untouched.
func TestRemovedPlugin(t *testing.T) {
	const plugin = "proxy"
	kubeadmVersion, err := kubeadm.CoreDNSVersion(load(t, kubeadm.RemovedPlugin))
	if err != nil {
		t.Fatal(err)
	}
	removed := corefileOf(t, kubeadm.RemovedPlugin)
	g := NewWithT(t)
	g.Expect(blocks(t, removed)).To(ContainElement(HaveSuffix("/" + plugin + " . 10.0.0.53")))

	// Where the migration data marks the plugin removed: one step, replaced by forward,
	// before every version kaddons ships and before kubeadm's.
	all := migration.ValidVersions()
	var removals []migration.Notice
	for i := 1; i < len(all); i++ {
		ns, err := migration.Deprecated(all[i-1], all[i], removed)
		g.Expect(err).NotTo(HaveOccurred())
		for _, n := range plugins(ns, plugin) {
			if n.Severity == migration.SevRemoved {
				removals = append(removals, n)
			}
		}
	}
	g.Expect(removals).To(HaveLen(1))
	g.Expect(removals[0].ReplacedBy).To(Equal("forward"))
	removedIn := slices.Index(all, removals[0].Version)
	t.Logf("corefile-migration: %s", removals[0].ToString())
	g.Expect(removedIn).To(BeNumerically("<=", slices.Index(all, kubeadmVersion)))

	for _, target := range channelVersions(t) {
		t.Run(target, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(removedIn).To(BeNumerically("<=", slices.Index(all, target)))

			// The target's own plugin table lacks it: Unsupported over the last step into
			// the target names it at the target, whichever way kaddons migrates.
			ns, err := migration.Unsupported(prior(t, target), target, removed)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(plugins(ns, plugin)).To(ContainElement(HaveField("Version", target)))
			g.Expect(ns).To(HaveEach(HaveField("Plugin", plugin)), "only proxy is unknown to %s", target)
			t.Logf("Unsupported(%q, %q, removed) = %v", prior(t, target), target, notices(ns))

			switch {
			case target == kubeadmVersion:
				// The same version: every call short-circuits (kubeadm's
				// isCoreDNSConfigMapMigrationRequired too), so only the table check above sees it.
				out, err := migration.Migrate(kubeadmVersion, target, removed, false)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(out).To(Equal(removed))
				deprecated, err := migration.Deprecated(kubeadmVersion, target, removed)
				g.Expect(err).NotTo(HaveOccurred())
				unsupported, err := migration.Unsupported(kubeadmVersion, target, removed)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(append(deprecated, unsupported...)).To(BeEmpty())
				t.Logf("Migrate/Deprecated/Unsupported(%q, %q, removed): unchanged, no notices", kubeadmVersion, target)
			case migration.ValidUpMigration(kubeadmVersion, target) != nil:
				// Downwards, kubeadm's calls refuse before they read the Corefile, and
				// MigrateDown keeps the plugin without a word.
				_, migrateErr := migration.Migrate(kubeadmVersion, target, removed, false)
				g.Expect(migrateErr).To(HaveOccurred())
				out, err := migration.MigrateDown(kubeadmVersion, target, removed)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(blocks(t, out)).To(ContainElement(HaveSuffix("/" + plugin + " . 10.0.0.53")))
				t.Logf("Migrate(%q, %q, removed, false): %v; MigrateDown keeps %s", kubeadmVersion, target, migrateErr, plugin)
			default:
				upwards(t, kubeadmVersion, target, removed, plugin)
			}
		})
	}

	// Upwards from kubeadm's version, as kubeadm's own upgrade checks run.
	for _, target := range all[slices.Index(all, kubeadmVersion)+1:] {
		t.Run("from kubeadm up to "+target, func(t *testing.T) {
			upwards(t, kubeadmVersion, target, removed, plugin)
		})
	}
}

// upwards checks kubeadm's calls on a Corefile with a plugin the migration data dropped
// before from: Deprecated is silent about it (the plugin is not in any table it walks),
// Unsupported (kubeadm's preflight checkUnsupportedPlugins) names it at every step, and
// Migrate leaves it in place.
func upwards(t *testing.T, from, to, corefileStr, plugin string) {
	t.Helper()
	g := NewWithT(t)
	deprecated, err := migration.Deprecated(from, to, corefileStr)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(plugins(deprecated, plugin)).To(BeEmpty())
	unsupported, err := migration.Unsupported(from, to, corefileStr)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(plugins(unsupported, plugin)).To(ContainElement(HaveField("Version", to)))
	out, err := migration.Migrate(from, to, corefileStr, false)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(blocks(t, out)).To(ContainElement(HaveSuffix("/" + plugin + " . 10.0.0.53")))
	t.Logf("Deprecated(%q, %q, removed) = %v; Unsupported names %s %d times; Migrate keeps it",
		from, to, notices(deprecated), plugin, len(plugins(unsupported, plugin)))
}
