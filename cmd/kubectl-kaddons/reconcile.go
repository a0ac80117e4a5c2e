package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// waitOptions are the flags of the commands that ask for a reconcile and wait for it.
type waitOptions struct {
	wait    bool
	timeout time.Duration
}

func (o *waitOptions) bind(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&o.wait, "wait", true, "Wait for the operator to handle the reconcile, and report the add-on's Ready condition.")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 2*time.Minute, "How long to wait for the reconcile.")
}

// pollInterval is how often a wait reads the add-on.
const pollInterval = time.Second

func newReconcileCommand(kube *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	var o waitOptions
	cmd := &cobra.Command{
		Use:   "reconcile KIND/NAME",
		Short: "Ask the operator to reconcile an add-on now (every object applied), and wait for the result",
		Long: "reconcile sets the add-on's " + addonsv1alpha1.AnnotationRequestedAt + " annotation to the current time, which\n" +
			"makes the operator apply every object of the add-on, drifted or not, and copy the value into\n" +
			"status.lastHandledReconcileAt. It then waits (--timeout) for that copy, and while the add-on is still\n" +
			"progressing, and prints the Ready condition. Exit status: 0 when Ready is True for the add-on's current\n" +
			"generation; 1 otherwise (the reason and message on stderr), on a timeout, or for a suspended add-on.",
		Example: `  kubectl kaddons reconcile coredns/coredns -n kube-system
  kubectl kaddons reconcile metricsserver/metrics-server -n kube-system --timeout 5m
  kubectl kaddons reconcile coredns/coredns -n kube-system --wait=false`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeAddonRefs(kube),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ref, err := connect(kube, args[0])
			if err != nil {
				return err
			}
			addon, err := c.get(cmd.Context(), ref)
			if err != nil {
				return err
			}
			if why := suspendedBy(addon); why != "" {
				return fmt.Errorf("%s is suspended (%s): resume it first", ref, why)
			}
			return reconcileAddon(cmd.Context(), c, ref, nil, o, streams)
		},
	}
	o.bind(cmd)
	return cmd
}

func newSuspendCommand(kube *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	return &cobra.Command{
		Use:   "suspend KIND/NAME",
		Short: "Stop the operator from applying and pruning an add-on (spec.suspend: true)",
		Long: "suspend sets spec.suspend to true with a merge patch: the operator applies and prunes nothing for the\n" +
			"add-on until it is resumed. What runs keeps running.",
		Example:           `  kubectl kaddons suspend coredns/coredns -n kube-system`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeAddonRefs(kube),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ref, err := connect(kube, args[0])
			if err != nil {
				return err
			}
			if err := patchAddon(cmd.Context(), c, ref, map[string]any{"spec": map[string]any{"suspend": true}}); err != nil {
				return err
			}
			_, _ = fmt.Fprintf(streams.Out, "%s suspended\n", ref)
			return nil
		},
	}
}

func newResumeCommand(kube *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	var o waitOptions
	cmd := &cobra.Command{
		Use:   "resume KIND/NAME",
		Short: "Let the operator reconcile a suspended add-on again, and wait for the result",
		Long: "resume clears spec.suspend and, in the same merge patch, asks for a reconcile as `reconcile` does, then\n" +
			"waits for it (--wait, --timeout) and prints the Ready condition, with reconcile's exit status.",
		Example: `  kubectl kaddons resume coredns/coredns -n kube-system
  kubectl kaddons resume coredns/coredns -n kube-system --wait=false`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeAddonRefs(kube),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ref, err := connect(kube, args[0])
			if err != nil {
				return err
			}
			return reconcileAddon(cmd.Context(), c, ref, map[string]any{"suspend": nil}, o, streams)
		},
	}
	o.bind(cmd)
	return cmd
}

// connect connects to the cluster and reads the KIND/NAME argument.
func connect(kube *genericclioptions.ConfigFlags, arg string) (*cluster, addonRef, error) {
	c, err := newCluster(kube)
	if err != nil {
		return nil, addonRef{}, err
	}
	ref, err := c.parseRef(arg)
	return c, ref, err
}

// suspendedBy says what keeps the operator from reconciling u: spec.suspend or the
// paused annotation; "" when nothing does.
func suspendedBy(u *unstructured.Unstructured) string {
	if suspended, _, _ := unstructured.NestedBool(u.Object, "spec", "suspend"); suspended {
		return "spec.suspend"
	}
	if u.GetAnnotations()[addonsv1alpha1.AnnotationPaused] == "true" {
		return "the " + addonsv1alpha1.AnnotationPaused + " annotation"
	}
	return ""
}

// patchAddon merge-patches the add-on ref names with patch.
func patchAddon(ctx context.Context, c *cluster, ref addonRef, patch map[string]any) error {
	data, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(ref.gvk)
	u.SetNamespace(ref.namespace)
	u.SetName(ref.name)
	if err := c.client.Patch(ctx, u, client.RawPatch(types.MergePatchType, data)); err != nil {
		return fmt.Errorf("patching %s: %w", ref, err)
	}
	return nil
}

// reconcileAddon sets the requested-at annotation of the add-on ref names to the
// current time (with spec, when not nil, in the same merge patch) and, with o.wait,
// waits for the operator to handle it and reports the add-on's readiness.
func reconcileAddon(ctx context.Context, c *cluster, ref addonRef, spec map[string]any, o waitOptions,
	streams genericiooptions.IOStreams) error {
	requestedAt := time.Now().Format(time.RFC3339Nano)
	patch := map[string]any{"metadata": map[string]any{"annotations": map[string]any{addonsv1alpha1.AnnotationRequestedAt: requestedAt}}}
	if spec != nil {
		patch["spec"] = spec
	}
	if err := patchAddon(ctx, c, ref, patch); err != nil {
		return err
	}
	_, _ = fmt.Fprintf(streams.ErrOut, "requested a reconcile of %s (%s=%s)\n", ref, addonsv1alpha1.AnnotationRequestedAt, requestedAt)
	if !o.wait {
		return nil
	}
	_, _ = fmt.Fprintf(streams.ErrOut, "waiting up to %s for the operator to handle it\n", o.timeout)
	addon, err := waitHandled(ctx, c, ref, requestedAt, o.timeout)
	if err != nil {
		return err
	}
	if why := suspendedBy(addon); why != "" {
		return fmt.Errorf("%s is still suspended by %s", ref, why)
	}
	return reportReady(streams.Out, ref, addon)
}

// waitHandled waits until the add-on's status.lastHandledReconcileAt is requestedAt and,
// then, while it is progressing (the Ready condition is for an older generation, or
// Progressing is True) up to timeout. It returns the add-on as last read.
func waitHandled(ctx context.Context, c *cluster, ref addonRef, requestedAt string, timeout time.Duration) (*unstructured.Unstructured, error) {
	var addon *unstructured.Unstructured
	handled := false
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, pollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		u, err := c.get(ctx, ref)
		if err != nil {
			if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
				return false, err
			}
			// Anything else (a lost connection, a read the client's rate limiter would
			// only allow after the deadline) is tried again until the timeout.
			lastErr = err
			return false, nil
		}
		addon = u
		last, _, _ := unstructured.NestedString(u.Object, "status", "lastHandledReconcileAt")
		handled = last == requestedAt
		return handled && !progressing(u), nil
	})
	switch {
	case err == nil:
		return addon, nil
	case handled:
		// Still progressing when the time ran out: the Ready condition says where it stands.
		return addon, nil
	case addon != nil && (errors.Is(err, context.DeadlineExceeded) || wait.Interrupted(err)):
		last, _, _ := unstructured.NestedString(addon.Object, "status", "lastHandledReconcileAt")
		return nil, fmt.Errorf("%s: the operator did not handle the reconcile requested at %s within %s "+
			"(status.lastHandledReconcileAt is %q): is it running?", ref, requestedAt, timeout, printable(last, keepNone))
	case lastErr != nil && (errors.Is(err, context.DeadlineExceeded) || wait.Interrupted(err)):
		return nil, lastErr
	default:
		return nil, err
	}
}

// progressing reports whether the operator is still working on u: its Ready condition
// is for an older generation, or its Progressing condition is True.
func progressing(u *unstructured.Unstructured) bool {
	if readinessOf(u).reason == reasonNotObserved {
		return true
	}
	p := findCondition(u, addonsv1alpha1.ConditionProgressing)
	return p != nil && p.Status == string(metav1.ConditionTrue)
}

// reportReady prints the add-on's Ready condition, and returns an exit error unless it
// is True for the current generation.
func reportReady(w io.Writer, ref addonRef, u *unstructured.Unstructured) error {
	r := readinessOf(u)
	if r.status == string(metav1.ConditionTrue) {
		_, _ = fmt.Fprintf(w, "%s reconciled: Ready=True, %s: %s\n", ref, printable(r.reason, keepNone), printable(r.message, keepNone))
		return nil
	}
	return withCode(1, fmt.Errorf("%s is not ready: Ready=%s, %s: %s", ref, r.status, r.reason, r.message))
}
