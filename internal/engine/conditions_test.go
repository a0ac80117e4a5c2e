package engine

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

func TestConditionSetters(t *testing.T) {
	const generation = 7
	type want struct {
		ready, progressing, degraded, stalled metav1.ConditionStatus // "" means absent
		reason                                string
		phase                                 string
		healthy                               bool
	}
	stalledBefore := func() addonsv1alpha1.AddonStatus {
		s := addonsv1alpha1.AddonStatus{}
		markStalled(&s, 1, addonsv1alpha1.ReasonVersionNotFound, "old")
		return s
	}
	degradedBefore := func() addonsv1alpha1.AddonStatus {
		s := addonsv1alpha1.AddonStatus{}
		markFailed(&s, 1, addonsv1alpha1.ReasonApplyFailed, "old")
		return s
	}
	for _, tc := range []struct {
		name   string
		before func() addonsv1alpha1.AddonStatus
		set    func(*addonsv1alpha1.AddonStatus)
		want   want
	}{
		{
			name: "ready", before: stalledBefore,
			set: func(s *addonsv1alpha1.AddonStatus) { markReady(s, generation, "ok") },
			want: want{ready: "True", progressing: "False", degraded: "False", reason: addonsv1alpha1.ReasonReconciled,
				phase: phaseReady, healthy: true},
		},
		{
			name:   "progressing clears stalled",
			before: stalledBefore,
			set: func(s *addonsv1alpha1.AddonStatus) {
				markProgressing(s, generation, addonsv1alpha1.ReasonChildrenNotReady, "Deployment ns/x: 0/2")
			},
			want: want{ready: "False", progressing: "True", degraded: "False", reason: addonsv1alpha1.ReasonChildrenNotReady,
				phase: phaseProgressing},
		},
		{
			name:   "progressing ends an apply failure",
			before: degradedBefore,
			set: func(s *addonsv1alpha1.AddonStatus) {
				markProgressing(s, generation, addonsv1alpha1.ReasonChildrenNotReady, "waiting")
			},
			want: want{ready: "False", progressing: "True", degraded: "False", reason: addonsv1alpha1.ReasonChildrenNotReady,
				phase: phaseProgressing},
		},
		{
			name:   "stalled",
			before: func() addonsv1alpha1.AddonStatus { return addonsv1alpha1.AddonStatus{} },
			set: func(s *addonsv1alpha1.AddonStatus) {
				markStalled(s, generation, addonsv1alpha1.ReasonInvalidPatch, "patches[0] has no kind")
			},
			want: want{ready: "False", progressing: "False", degraded: "False", stalled: "True", reason: addonsv1alpha1.ReasonInvalidPatch,
				phase: phaseStalled},
		},
		{
			name:   "stalled keeps an earlier degradation, restated",
			before: degradedBefore,
			set: func(s *addonsv1alpha1.AddonStatus) {
				markStalled(s, generation, addonsv1alpha1.ReasonVersionNotFound, "no such version")
			},
			want: want{ready: "False", progressing: "False", degraded: "True", stalled: "True", reason: addonsv1alpha1.ReasonVersionNotFound,
				phase: phaseStalled},
		},
		{
			name:   "failed",
			before: stalledBefore,
			set: func(s *addonsv1alpha1.AddonStatus) {
				markFailed(s, generation, addonsv1alpha1.ReasonApplyFailed, "applying Deployment ns/x: invalid")
			},
			want: want{ready: "False", progressing: "False", degraded: "True", reason: addonsv1alpha1.ReasonApplyFailed,
				phase: phaseFailed},
		},
		{
			name:   "deleting",
			before: func() addonsv1alpha1.AddonStatus { return addonsv1alpha1.AddonStatus{} },
			set: func(s *addonsv1alpha1.AddonStatus) {
				markDeleting(s, generation, addonsv1alpha1.ReasonDeleting, "deleting children")
			},
			want: want{ready: "False", progressing: "True", reason: addonsv1alpha1.ReasonDeleting,
				phase: phaseDeleting},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.before()
			tc.set(&s)
			check := func(typ string, want metav1.ConditionStatus) {
				t.Helper()
				c := meta.FindStatusCondition(s.Conditions, typ)
				if want == "" {
					if c != nil {
						t.Errorf("%s = %s, want absent", typ, c.Status)
					}
					return
				}
				if c == nil {
					t.Fatalf("%s is absent, want %s", typ, want)
				}
				if c.Status != want {
					t.Errorf("%s = %s, want %s", typ, c.Status, want)
				}
				if c.ObservedGeneration != generation {
					t.Errorf("%s observedGeneration = %d, want %d", typ, c.ObservedGeneration, generation)
				}
			}
			check(addonsv1alpha1.ConditionReady, tc.want.ready)
			check(addonsv1alpha1.ConditionProgressing, tc.want.progressing)
			check(addonsv1alpha1.ConditionStalled, tc.want.stalled)
			if tc.want.degraded != "" {
				check(addonsv1alpha1.ConditionDegraded, tc.want.degraded)
			}
			if r := meta.FindStatusCondition(s.Conditions, addonsv1alpha1.ConditionReady).Reason; r != tc.want.reason {
				t.Errorf("Ready reason = %s, want %s", r, tc.want.reason)
			}
			if s.Phase != tc.want.phase || s.Healthy != tc.want.healthy || s.ObservedGeneration != generation {
				t.Errorf("common status = %+v, want phase %s healthy %v generation %d", s.CommonStatus, tc.want.phase, tc.want.healthy, generation)
			}
		})
	}
}

func TestConditionMessagesAreBounded(t *testing.T) {
	s := addonsv1alpha1.AddonStatus{}
	long := make([]byte, 5000)
	for i := range long {
		long[i] = 'x'
	}
	markFailed(&s, 1, addonsv1alpha1.ReasonApplyFailed, string(long))
	if got := len(meta.FindStatusCondition(s.Conditions, addonsv1alpha1.ConditionReady).Message); got != maxMessageLength {
		t.Fatalf("message length = %d, want %d", got, maxMessageLength)
	}
}
