package engine

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// maxNotReadyInMessage bounds how many children a Ready message names.
const maxNotReadyInMessage = 3

// health is the outcome of checking every child with kstatus.
type health struct {
	// notReady describes each child that is not current, e.g.
	// "Deployment kube-system/coredns: Available: 1/2".
	notReady []string
}

// ready reports whether every child is current.
func (h health) ready() bool { return len(h.notReady) == 0 }

// message summarises the children that are not ready.
func (h health) message() string {
	if len(h.notReady) <= maxNotReadyInMessage {
		return strings.Join(h.notReady, "; ")
	}
	return fmt.Sprintf("%s; and %d more", strings.Join(h.notReady[:maxNotReadyInMessage], "; "),
		len(h.notReady)-maxNotReadyInMessage)
}

// checkHealth computes kstatus for every object in refs, read from the informer cache.
// minGeneration holds the generation each object had right after it was applied: a cached
// copy older than that has not caught up yet and counts as in progress.
func checkHealth(ctx context.Context, reader client.Reader, refs []addonsv1alpha1.ObjectReference,
	minGeneration map[addonsv1alpha1.ObjectReference]int64) (health, error) {
	var h health
	for _, ref := range refs {
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(ref.GroupVersionKind())
		err := reader.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, live)
		if apierrors.IsNotFound(err) {
			h.notReady = append(h.notReady, ref.String()+": not found")
			continue
		}
		if err != nil {
			return h, fmt.Errorf("reading %s: %w", ref, err)
		}
		if live.GetGeneration() < minGeneration[ref] {
			h.notReady = append(h.notReady, ref.String()+": waiting for the applied generation to be observed")
			continue
		}
		res, err := status.Compute(live)
		if err != nil {
			return h, fmt.Errorf("computing status of %s: %w", ref, err)
		}
		if res.Status != status.CurrentStatus {
			msg := res.Message
			if msg == "" {
				msg = string(res.Status)
			}
			h.notReady = append(h.notReady, ref.String()+": "+msg)
		}
	}
	return h, nil
}
