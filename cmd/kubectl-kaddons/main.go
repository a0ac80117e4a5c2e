// Command kubectl-kaddons is the kubectl plugin of kaddons (`kubectl kaddons ...`): it
// renders add-ons exactly as the operator would apply them, diffs them against a
// cluster by server-side dry-run, lists the add-ons and their readiness, shows an
// add-on's objects and events, asks for a reconcile, suspends and resumes add-ons,
// prints the client's and the operator's versions, and builds, pushes and verifies
// channel bundles. Its kubeconfig flags are kubectl's own.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// exitError carries the exit code a command ends with.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return ""
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// withCode wraps err so that the command exits with code.
func withCode(code int, err error) error { return &exitError{code: code, err: err} }

func main() {
	// An interrupt ends a watch or a wait through the context.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := runContext(ctx, os.Args[1:], genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	stop()
	os.Exit(code)
}

// run executes the plugin with args and returns its exit code: 0 on success, the code of
// an exitError, 1 for any other error.
func run(args []string, streams genericiooptions.IOStreams) int {
	return runContext(context.Background(), args, streams)
}

// runContext is run, ended early when ctx is.
func runContext(ctx context.Context, args []string, streams genericiooptions.IOStreams) int {
	cmd := newRootCommand(streams)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	code := 1
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
	}
	// An error may quote the API server, a registry or a package: printable.
	if msg := err.Error(); msg != "" {
		_, _ = fmt.Fprintln(streams.ErrOut, "error: "+printable(msg, keepLines))
	}
	return code
}

// newRootCommand builds `kubectl kaddons` and its subcommands.
func newRootCommand(streams genericiooptions.IOStreams) *cobra.Command {
	kube := genericclioptions.NewConfigFlags(true)
	root := &cobra.Command{
		Use:   "kubectl-kaddons",
		Short: "Render, diff and inspect kaddons add-ons",
		Long: "kubectl kaddons renders add-on resources (CoreDNS, MetricsServer, ...) exactly as the kaddons operator\n" +
			"would apply them, diffs them against a cluster, lists the add-ons in it with their objects and events, and\n" +
			"asks for, suspends and resumes their reconciliation.",
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl kaddons"},
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	kube.AddFlags(root.PersistentFlags())
	root.AddCommand(
		newRenderCommand(kube, streams),
		newDiffCommand(kube, streams),
		newGetCommand(kube, streams),
		newTreeCommand(kube, streams),
		newEventsCommand(kube, streams),
		newReconcileCommand(kube, streams),
		newSuspendCommand(kube, streams),
		newResumeCommand(kube, streams),
		newCheckCommand(kube, streams),
		newVersionCommand(kube, streams),
		newBundleCommand(streams),
	)
	return root
}
