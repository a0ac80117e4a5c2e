package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/declarative/pkg/applier"
	"sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/declarative/pkg/manifest"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// Apply stages. Objects are applied stage by stage so that what others depend on exists
// first; deletes run in the reverse order.
const (
	stageCRDs = iota
	stageNamespaces
	stageConfig
	stageBindings
	stageWorkloads
	stageAPIEndpoints
)

// stageOf returns the apply stage of a kind.
func stageOf(group, kind string) int {
	switch {
	case kind == "CustomResourceDefinition" && group == "apiextensions.k8s.io":
		return stageCRDs
	case kind == "Namespace" && group == "":
		return stageNamespaces
	case group == rbacGroup && (kind == kindRoleBinding || kind == kindClusterRoleBinding):
		// A binding is checked against the role it grants, which must exist first.
		return stageBindings
	case group == rbacGroup,
		group == "" && (kind == kindServiceAccount || kind == "ConfigMap" || kind == "Secret" ||
			kind == "ResourceQuota" || kind == "LimitRange"),
		group == "scheduling.k8s.io", group == "networking.k8s.io" && kind == "NetworkPolicy":
		return stageConfig
	case group == apiRegistrationGroup,
		group == "admissionregistration.k8s.io":
		return stageAPIEndpoints
	default:
		return stageWorkloads
	}
}

// applyConcurrency bounds the parallel writes within one stage.
const applyConcurrency = 4

// waitTimeout bounds the applier's waits: for a CRD of the package to be served, and for
// an object being re-created to be gone.
const waitTimeout = 30 * time.Second

// Applier is kaddons' KDP applier: staged server-side apply with the kaddons field
// manager, followed by an inventory-based prune. It replaces KDP's appliers, which apply
// client-side or prune by label selector (see docs/architecture.md).
type Applier struct {
	client client.Client
	reader client.Reader
}

var _ applier.Applier = &Applier{}

// NewApplier returns an Applier writing through c and reading live objects through reader.
func NewApplier(c client.Client, reader client.Reader) *Applier {
	return &Applier{client: c, reader: reader}
}

// Apply implements KDP's applier.Applier. It must run inside an engine reconcile, which
// supplies the previous inventory and receives the outcome.
func (a *Applier) Apply(ctx context.Context, opts applier.ApplierOptions) error {
	st := stateFrom(ctx)
	if st == nil {
		return errors.New("kaddons applier called outside an engine reconcile")
	}
	st.applyCalled = true
	st.applied = map[addonsv1alpha1.ObjectReference]int64{}

	stages := map[int][]*manifest.Object{}
	for _, o := range opts.Objects {
		s := stageOf(o.Group, o.Kind)
		stages[s] = append(stages[s], o)
	}
	previous := st.addon.GetAddonStatus().Inventory
	skip, external, err := a.handedOver(ctx, st, opts.Objects)
	if err != nil {
		st.modeErr = err
		return err
	}
	desired := make([]addonsv1alpha1.ObjectReference, 0, len(opts.Objects))
	for s := stageCRDs; s <= stageAPIEndpoints; s++ {
		for _, o := range stages[s] {
			if ref := refOf(o.UnstructuredObject()); !external[ref] {
				desired = append(desired, ref)
			}
		}
	}
	for s := range stages {
		stages[s] = slices.DeleteFunc(stages[s], func(o *manifest.Object) bool {
			ref := refOf(o.UnstructuredObject())
			return skip[ref] || (st.onlyApply != nil && !st.onlyApply[ref])
		})
	}
	for s := stageCRDs; s <= stageAPIEndpoints; s++ {
		if err := a.applyStage(ctx, st, stages[s]); err != nil {
			// Keep everything we may have created in the inventory, and prune nothing:
			// a partial apply must never delete what is still running.
			st.inventory = mergeInventory(previous, desired, st.applied)
			st.applyErr = err
			return err
		}
		if s == stageCRDs && len(stages[s]) > 0 {
			if err := a.waitEstablished(ctx, stages[s]); err != nil {
				st.inventory = mergeInventory(previous, desired, st.applied)
				st.applyErr = err
				return err
			}
		}
	}
	st.inventory = desired

	stale := slices.DeleteFunc(staleObjects(previous, desired), func(ref addonsv1alpha1.ObjectReference) bool {
		return a.ignored(ctx, ref)
	})
	owner := types.NamespacedName{Namespace: st.addon.GetNamespace(), Name: st.addon.GetName()}
	kind := st.addon.GetObjectKind().GroupVersionKind().Kind
	pruned, err := deleteObjects(ctx, a.client, a.reader, stale, kind, owner)
	st.pruned = pruned
	if err != nil {
		// What could not be deleted stays in the inventory so the next reconcile retries.
		st.inventory = mergeInventory(staleObjects(stale, pruned), desired, nil)
		st.pruneErr = err
		return err
	}
	return nil
}

// handedOver returns the objects kaddons must not write this time: those whose live copy
// (or rendered manifest) carries mode ignore, and those with mode ensure-exists that
// already exist. It also returns the external objects, which are neither written nor
// recorded in the inventory: Namespaces that existed before the add-on. An unknown mode
// is an error naming the object, and so is an object another add-on owns.
func (a *Applier) handedOver(ctx context.Context, st *reconcileState,
	objects []*manifest.Object) (skip, external map[addonsv1alpha1.ObjectReference]bool, _ error) {
	skip, external = map[addonsv1alpha1.ObjectReference]bool{}, map[addonsv1alpha1.ObjectReference]bool{}
	st.live = map[addonsv1alpha1.ObjectReference]liveInfo{}
	for _, o := range objects {
		u := o.UnstructuredObject()
		ref := refOf(u)
		mode := u.GetAnnotations()[addonsv1alpha1.AnnotationMode]
		exists := false
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(ref.GroupVersionKind())
		err := a.client.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, live)
		if apierrors.IsNotFound(err) && ref.Group == "" && ref.Kind == kindNamespace {
			// The cache holds only managed objects. A Namespace that exists unmanaged
			// holds things that are not the add-on's: use it, never adopt or delete it.
			switch ok, err := a.existsUnmanaged(ctx, ref); {
			case err != nil:
				return nil, nil, err
			case ok:
				external[ref], skip[ref] = true, true
				continue
			}
		}
		switch {
		case err == nil:
			exists = true
			if owner := ownerOf(live.GetLabels()); owner != "" && owner != st.ownerKey() {
				return nil, nil, &conflictError{ref: ref, owner: owner}
			}
			st.live[ref] = liveInfo{exists: true, resourceVersion: live.GetResourceVersion(), generation: live.GetGeneration()}
			if m, ok := live.GetAnnotations()[addonsv1alpha1.AnnotationMode]; ok {
				mode = m
			}
		case !apierrors.IsNotFound(err) && !meta.IsNoMatchError(err):
			// A kind the package's own CRD defines is not served yet: nothing exists.
			return nil, nil, fmt.Errorf("reading %s: %w", ref, err)
		}
		switch mode {
		case "":
		case addonsv1alpha1.ModeIgnore:
			skip[ref] = true
		case addonsv1alpha1.ModeEnsureExists:
			skip[ref] = exists
		default:
			return nil, nil, fmt.Errorf("%s has annotation %s=%q; use %q or %q", ref, addonsv1alpha1.AnnotationMode, mode,
				addonsv1alpha1.ModeEnsureExists, addonsv1alpha1.ModeIgnore)
		}
	}
	return skip, external, nil
}

// existsUnmanaged reads ref from the API server, past the label-filtered cache, and
// reports whether it exists without kaddons' labels.
func (a *Applier) existsUnmanaged(ctx context.Context, ref addonsv1alpha1.ObjectReference) (bool, error) {
	live := &metav1.PartialObjectMetadata{}
	live.SetGroupVersionKind(ref.GroupVersionKind())
	err := a.reader.Get(ctx, types.NamespacedName{Name: ref.Name}, live)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading %s: %w", ref, err)
	}
	return ownerOf(live.GetLabels()) == "", nil
}

// conflictError reports a rendered object that another add-on owns.
type conflictError struct {
	ref   addonsv1alpha1.ObjectReference
	owner string
}

func (e *conflictError) Error() string {
	return fmt.Sprintf("%s already exists and belongs to %s; kaddons does not take it over", e.ref, e.owner)
}

// ownerOf formats the instance labels of an object as kind namespace/name, or "" when
// kaddons does not manage it.
func ownerOf(labels map[string]string) string {
	if labels[LabelManagedBy] != ManagedByValue || labels[LabelName] == "" {
		return ""
	}
	return labels[LabelKind] + " " + labels[LabelNamespace] + "/" + labels[LabelName]
}

// ignored reports whether the live object carries mode ignore, which keeps kaddons from
// pruning or deleting it.
func (a *Applier) ignored(ctx context.Context, ref addonsv1alpha1.ObjectReference) bool {
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(ref.GroupVersionKind())
	if err := a.client.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, live); err != nil {
		return false
	}
	return live.GetAnnotations()[addonsv1alpha1.AnnotationMode] == addonsv1alpha1.ModeIgnore
}

// applyStage server-side applies one stage's objects with bounded concurrency.
func (a *Applier) applyStage(ctx context.Context, st *reconcileState, objects []*manifest.Object) error {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, applyConcurrency)
	)
	for _, o := range objects {
		wg.Add(1)
		sem <- struct{}{}
		go func(o *manifest.Object) {
			defer wg.Done()
			defer func() { <-sem }()
			u := o.UnstructuredObject().DeepCopy()
			ref := refOf(u)
			err := a.apply(ctx, st, u)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("applying %s: %w", ref, err))
				return
			}
			st.applied[ref] = u.GetGeneration()
			if !st.inputsChanged && drifted(st.live[ref], u) {
				st.drifted = append(st.drifted, ref)
			}
		}(o)
	}
	wg.Wait()
	return errors.Join(errs...)
}

// bindingRetryTimeout bounds the retries of a binding whose role the API server's RBAC
// cache has not seen yet.
const bindingRetryTimeout = 10 * time.Second

// apply server-side applies one object. A (Cluster)RoleBinding is retried briefly on
// NotFound: without the bind verb, the API server checks the role it grants, and its
// RBAC cache may not hold a role created a moment ago.
func (a *Applier) apply(ctx context.Context, st *reconcileState, u *unstructured.Unstructured) error {
	err := a.applyRetryingBindings(ctx, u)
	fields := immutableFields(err)
	if fields == "" {
		return err
	}
	ref := refOf(u)
	if up := st.addon.GetAddonSpec().Upgrade; up == nil || !up.RecreateOnImmutable {
		return &immutableError{ref: ref, fields: fields, err: err}
	}
	log.FromContext(ctx).Info("Re-creating object to change immutable fields", "object", ref.String(), "fields", fields)
	if err := a.recreate(ctx, u); err != nil {
		return fmt.Errorf("re-creating %s to change %s: %w", ref, fields, err)
	}
	st.recreated = append(st.recreated, ref)
	return a.applyRetryingBindings(ctx, u)
}

// immutableError reports an apply refused because it changes immutable fields.
type immutableError struct {
	ref    addonsv1alpha1.ObjectReference
	fields string
	err    error
}

func (e *immutableError) Error() string {
	return fmt.Sprintf("the new manifest changes %s, which cannot be changed in place; "+
		"set spec.upgrade.recreateOnImmutable to let kaddons delete and re-create %s", e.fields, e.ref)
}

func (e *immutableError) Unwrap() error { return e.err }

// immutableFields returns the fields an Invalid error says are immutable, or "".
func immutableFields(err error) string {
	var apiStatus apierrors.APIStatus
	if err == nil || !apierrors.IsInvalid(err) || !errors.As(err, &apiStatus) {
		return ""
	}
	var fields []string
	if details := apiStatus.Status().Details; details != nil {
		for _, c := range details.Causes {
			if strings.Contains(c.Message, "immutable") {
				fields = append(fields, c.Field)
			}
		}
	}
	if len(fields) == 0 && strings.Contains(err.Error(), "field is immutable") {
		fields = append(fields, "an immutable field")
	}
	return strings.Join(fields, ", ")
}

// recreate deletes the live object and waits until it is gone.
func (a *Applier) recreate(ctx context.Context, u *unstructured.Unstructured) error {
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(u.GroupVersionKind())
	live.SetNamespace(u.GetNamespace())
	live.SetName(u.GetName())
	if err := a.client.Delete(ctx, live, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		err := a.reader.Get(ctx, types.NamespacedName{Namespace: u.GetNamespace(), Name: u.GetName()}, live.DeepCopy())
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
}

// applyRetryingBindings server-side applies u, retrying a binding briefly on NotFound.
func (a *Applier) applyRetryingBindings(ctx context.Context, u *unstructured.Unstructured) error {
	applyOnce := func() error {
		return a.client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u),
			client.FieldOwner(FieldManager), client.ForceOwnership)
	}
	if stageOf(u.GroupVersionKind().Group, u.GetKind()) != stageBindings {
		return applyOnce()
	}
	var err error
	_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, bindingRetryTimeout, true, func(context.Context) (bool, error) {
		err = applyOnce()
		return !apierrors.IsNotFound(err), nil
	})
	return err
}

// waitEstablished waits until the CRDs of the package are served, so that custom
// resources of the same package can be applied right after.
func (a *Applier) waitEstablished(ctx context.Context, crds []*manifest.Object) error {
	for _, o := range crds {
		name := o.GetName()
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, waitTimeout, true,
			func(ctx context.Context) (bool, error) {
				crd := &unstructured.Unstructured{}
				crd.SetGroupVersionKind(o.GroupVersionKind())
				if err := a.reader.Get(ctx, types.NamespacedName{Name: name}, crd); err != nil {
					return false, client.IgnoreNotFound(err)
				}
				res, err := status.Compute(crd)
				if err != nil {
					return false, err
				}
				return res.Status == status.CurrentStatus, nil
			})
		if err != nil {
			return fmt.Errorf("CustomResourceDefinition %s is not established: %w", name, err)
		}
	}
	return nil
}

// deleteObjects deletes refs in reverse stage order, skipping objects that are already gone
// or that no longer carry the owner's instance labels (someone else took them over).
// It returns the refs it deleted or found gone.
func deleteObjects(ctx context.Context, c client.Client, reader client.Reader, refs []addonsv1alpha1.ObjectReference,
	kind string, owner types.NamespacedName) ([]addonsv1alpha1.ObjectReference, error) {
	logger := log.FromContext(ctx)
	ordered := slices.Clone(refs)
	slices.SortStableFunc(ordered, func(x, y addonsv1alpha1.ObjectReference) int {
		return stageOf(y.Group, y.Kind) - stageOf(x.Group, x.Kind)
	})
	var (
		done []addonsv1alpha1.ObjectReference
		errs []error
	)
	for _, ref := range ordered {
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(ref.GroupVersionKind())
		err := reader.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, live)
		if apierrors.IsNotFound(err) {
			done = append(done, ref)
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("reading %s: %w", ref, err))
			continue
		}
		if !ownedBy(live.GetLabels(), kind, owner) {
			logger.Info("Not deleting object that is no longer labelled as ours", "object", ref.String())
			done = append(done, ref)
			continue
		}
		err = c.Delete(ctx, live, client.PropagationPolicy("Background"), client.Preconditions{UID: ptrTo(live.GetUID())})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, fmt.Errorf("deleting %s: %w", ref, err))
			continue
		}
		logger.Info("Deleted object", "object", ref.String())
		done = append(done, ref)
	}
	return done, errors.Join(errs...)
}

// drifted reports whether applying unchanged manifests changed the object: it was
// missing, its spec generation moved, or (for kinds without a generation, such as
// ConfigMaps) its resource version moved.
func drifted(before liveInfo, after *unstructured.Unstructured) bool {
	switch {
	case !before.exists:
		return true
	case after.GetGeneration() != 0:
		return after.GetGeneration() != before.generation
	default:
		return after.GetResourceVersion() != before.resourceVersion
	}
}

// refOf returns the inventory reference of u.
func refOf(u *unstructured.Unstructured) addonsv1alpha1.ObjectReference {
	gvk := u.GroupVersionKind()
	return addonsv1alpha1.ObjectReference{
		Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind,
		Namespace: u.GetNamespace(), Name: u.GetName(),
	}
}

// sameObject compares references ignoring the API version, which may change between
// package versions without making it another object.
func sameObject(x, y addonsv1alpha1.ObjectReference) bool {
	return x.Group == y.Group && x.Kind == y.Kind && x.Namespace == y.Namespace && x.Name == y.Name
}

// staleObjects returns the entries of previous that desired no longer contains.
func staleObjects(previous, desired []addonsv1alpha1.ObjectReference) []addonsv1alpha1.ObjectReference {
	var stale []addonsv1alpha1.ObjectReference
	for _, p := range previous {
		if !slices.ContainsFunc(desired, func(d addonsv1alpha1.ObjectReference) bool { return sameObject(p, d) }) {
			stale = append(stale, p)
		}
	}
	return stale
}

// mergeInventory returns desired plus the entries of extra it lacks. When applied is not
// nil, desired entries count only if they were applied.
func mergeInventory(extra, desired []addonsv1alpha1.ObjectReference,
	applied map[addonsv1alpha1.ObjectReference]int64) []addonsv1alpha1.ObjectReference {
	var out []addonsv1alpha1.ObjectReference
	for _, d := range desired {
		if _, ok := applied[d]; applied == nil || ok {
			out = append(out, d)
		}
	}
	for _, e := range extra {
		if !slices.ContainsFunc(out, func(o addonsv1alpha1.ObjectReference) bool { return sameObject(o, e) }) {
			out = append(out, e)
		}
	}
	return out
}

func ptrTo[T any](v T) *T { return &v }
