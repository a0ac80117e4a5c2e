package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/addon"
	"sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/addon/pkg/loaders"
	"sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/addon/pkg/status"
	"sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/declarative"
	"sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/declarative/pkg/applier"
	"sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/declarative/pkg/manifest"

	benchv1alpha1 "github.com/kaddons/kaddons/test/bench/api/v1alpha1"
)

// stockOptions configure the stock KDP reconciler process.
type stockOptions struct {
	applier     string
	channelsDir string
	metricsAddr string
	concurrency int
}

// bindFlags registers the stock role's flags on fs.
func (o *stockOptions) bindFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.applier, "applier", "direct", "Stock role: the KDP applier, direct (KDP's default) or applyset.")
	fs.StringVar(&o.channelsDir, "channels-dir", "channels", "Stock role: the channels directory.")
	fs.StringVar(&o.metricsAddr, "metrics-addr", "0", "Stock role: the metrics address.")
	fs.IntVar(&o.concurrency, "concurrency", 1, "Stock role: MaxConcurrentReconciles.")
}

// runStock runs a manager with the stock KDP reconciler for StockCoreDNS until ctx ends.
// Its client comes from the same place kaddons' does (ctrl.GetConfig, which reads
// KUBECONFIG), so both talk to the API server with the same client settings.
func runStock(ctx context.Context, o stockOptions) error {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading the client config: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 benchScheme,
		Metrics:                metricsserver.Options{BindAddress: o.metricsAddr},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	if err := setupStock(mgr, o); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// setupStock registers the stock reconciler the way KDP's guestbook example does:
// Init with the example's options, a controller for the kind, and WatchChildren.
func setupStock(mgr ctrl.Manager, o stockOptions) error {
	r := &declarative.Reconciler{}
	if err := initStockReconciler(r, mgr, o.channelsDir, o.applier); err != nil {
		return err
	}
	c, err := ctrl.NewControllerManagedBy(mgr).
		For(&benchv1alpha1.StockCoreDNS{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: o.concurrency}).
		Build(r)
	if err != nil {
		return fmt.Errorf("building the stock controller: %w", err)
	}
	err = declarative.WatchChildren(declarative.WatchChildrenOptions{
		Manager: mgr, Controller: c, Reconciler: r, LabelMaker: declarative.SourceLabel(mgr.GetScheme()),
	})
	if err != nil {
		return fmt.Errorf("watching children: %w", err)
	}
	return nil
}

// initStockReconciler initialises r with the guestbook example's options, KDP's own
// channel loader over the kaddons channels (kustomize mode, since the packages are
// kustomizations), and the named applier.
func initStockReconciler(r *declarative.Reconciler, mgr ctrl.Manager, channelsDir, applierName string) error {
	loader, err := loaders.NewManifestLoader(channelsDir)
	if err != nil {
		return fmt.Errorf("creating KDP's manifest loader: %w", err)
	}
	var a applier.Applier
	switch applierName {
	case "direct":
		a = applier.NewDirectApplier()
	case "applyset":
		a = applier.NewApplySetApplier(metav1.PatchOptions{FieldManager: "kdp-stock"}, metav1.DeleteOptions{}, applier.ApplysetOptions{})
	default:
		return fmt.Errorf("unknown applier %q: use direct or applyset", applierName)
	}
	err = r.Init(mgr, &benchv1alpha1.StockCoreDNS{},
		declarative.WithManifestController(loader),
		declarative.WithApplyKustomize(),
		declarative.WithObjectTransform(declarative.AddLabels(map[string]string{"example-app": coreDNS})),
		declarative.WithOwner(declarative.SourceAsOwner),
		declarative.WithLabels(declarative.SourceLabel(mgr.GetScheme())),
		declarative.WithStatus(status.NewKstatusCheck(mgr.GetClient(), r)),
		declarative.WithApplyPrune(),
		declarative.WithObjectTransform(addon.ApplyPatches),
		declarative.WithObjectTransform(clusterRBACPerNamespace),
		declarative.WithApplier(a),
	)
	if err != nil {
		return fmt.Errorf("initialising the stock KDP reconciler: %w", err)
	}
	return nil
}

// clusterRBACPerNamespace gives each instance its own ClusterRole and ClusterRoleBinding,
// suffixed with its namespace, and binds its own ServiceAccount: the one add-on-specific
// transform any multi-instance CoreDNS operator needs, kaddons included. Without it,
// every instance would relabel the one shared ClusterRole and the label-selected child
// watches would wake the other instances forever.
func clusterRBACPerNamespace(_ context.Context, obj declarative.DeclarativeObject, objects *manifest.Objects) error {
	ns := obj.GetNamespace()
	for _, o := range objects.Items {
		if o.Group != "rbac.authorization.k8s.io" {
			continue
		}
		switch o.Kind {
		case "ClusterRole":
			if err := o.SetName(o.GetName() + "-" + ns); err != nil {
				return err
			}
		case "ClusterRoleBinding":
			if err := rebindToNamespace(o, ns); err != nil {
				return err
			}
		}
	}
	return nil
}

// rebindToNamespace renames a ClusterRoleBinding, its roleRef and its ServiceAccount
// subjects for the instance in ns.
func rebindToNamespace(o *manifest.Object, ns string) error {
	if err := o.SetName(o.GetName() + "-" + ns); err != nil {
		return err
	}
	u := o.UnstructuredObject()
	role, _, _ := unstructured.NestedString(u.Object, "roleRef", "name")
	if err := o.SetNestedField(role+"-"+ns, "roleRef", "name"); err != nil {
		return err
	}
	subjects, _, _ := unstructured.NestedSlice(u.Object, "subjects")
	for _, s := range subjects {
		if m, ok := s.(map[string]any); ok && m["kind"] == "ServiceAccount" {
			m["namespace"] = ns
		}
	}
	return o.SetNestedSlice(subjects, "subjects")
}
