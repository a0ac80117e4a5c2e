package controllers

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/types"
	lua "github.com/yuin/gopher-lua"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine"
)

// argoCDHealthScript is the health script shipped for Argo CD.
var argoCDHealthScript = filepath.Join("..", "examples", "argocd", "health.lua")

// argoCDHealthStatuses are the statuses Argo CD accepts from a health script; any other
// value turns into Unknown.
var argoCDHealthStatuses = []string{"Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown"}

// argoCDHealth runs a health script the way Argo CD's lua.VM.ExecuteHealthLua does: a state
// with only the package, base and table libraries open (Argo CD adds a restricted os
// library, which the script does not use), the object as the global obj, a one-second
// deadline, and the table the script returns read as {status=..., message=...}.
func argoCDHealth(t *testing.T, script string, obj *unstructured.Unstructured) (healthStatus, message string) {
	t.Helper()
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer l.Close()
	for name, open := range map[string]lua.LGFunction{
		lua.LoadLibName: lua.OpenPackage,
		lua.BaseLibName: lua.OpenBase,
		lua.TabLibName:  lua.OpenTable,
	} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(open), Protect: true}, lua.LString(name)); err != nil {
			t.Fatalf("opening Lua library %q: %v", name, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	l.SetContext(ctx)
	l.SetGlobal("obj", luaValue(l, obj.Object))
	if err := l.DoString(script); err != nil {
		t.Fatalf("running the health script: %v", err)
	}
	result, ok := l.Get(-1).(*lua.LTable)
	if !ok {
		t.Fatalf("the health script returned %s, not a table", l.Get(-1).Type())
	}
	for field, out := range map[string]*string{"status": &healthStatus, "message": &message} {
		switch v := result.RawGetString(field).(type) {
		case lua.LString:
			*out = string(v)
		case *lua.LNilType:
		default:
			t.Fatalf("the health script returned %s %s, not a string", field, v.Type())
		}
	}
	return healthStatus, message
}

// luaValue converts a decoded JSON value into Lua as Argo CD does: objects become tables
// keyed by field name, arrays 1-indexed tables, numbers Lua numbers.
func luaValue(l *lua.LState, value any) lua.LValue {
	switch v := value.(type) {
	case bool:
		return lua.LBool(v)
	case float64:
		return lua.LNumber(v)
	case int64:
		return lua.LNumber(v)
	case int32:
		return lua.LNumber(v)
	case int:
		return lua.LNumber(v)
	case json.Number:
		return lua.LString(v)
	case string:
		return lua.LString(v)
	case []any:
		arr := l.CreateTable(len(v), 0)
		for _, item := range v {
			arr.Append(luaValue(l, item))
		}
		return arr
	case map[string]any:
		tbl := l.CreateTable(0, len(v))
		for key, item := range v {
			tbl.RawSetH(lua.LString(key), luaValue(l, item))
		}
		return tbl
	}
	return lua.LNil
}

// coreDNSObject reads the CoreDNS named like cr from the API server as Argo CD's cache
// holds it: unstructured, straight from JSON.
func coreDNSObject(t *testing.T, cr *addonsv1alpha1.CoreDNS) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(addonsv1alpha1.GroupVersion.WithKind("CoreDNS"))
	NewWithT(t).Expect(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(cr), u)).To(Succeed())
	return u
}

// updatedCoreDNSObject changes the live CoreDNS and returns the API server's answer to the
// update: the new generation with the status kaddons wrote for the previous one, the object
// a watcher sees before kaddons reconciles the change.
func updatedCoreDNSObject(t *testing.T, cr *addonsv1alpha1.CoreDNS, mutate func(u *unstructured.Unstructured)) *unstructured.Unstructured {
	t.Helper()
	var u *unstructured.Unstructured
	NewWithT(t).Eventually(func(g Gomega) {
		u = coreDNSObject(t, cr)
		mutate(u)
		err := k8sClient.Update(context.Background(), u)
		g.Expect(apierrors.IsConflict(err)).To(BeFalse(), "kaddons wrote the status in between")
		g.Expect(err).NotTo(HaveOccurred())
	}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())
	return u
}

// conditionsOf decodes the add-on status of an unstructured add-on.
func conditionsOf(t *testing.T, u *unstructured.Unstructured) *addonsv1alpha1.AddonStatus {
	t.Helper()
	cr := &addonsv1alpha1.CoreDNS{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, cr); err != nil {
		t.Fatalf("decoding CoreDNS: %v", err)
	}
	return &cr.Status.AddonStatus
}

// setSpec sets one spec field of an unstructured add-on.
func setSpec(t *testing.T, u *unstructured.Unstructured, value any, field string) {
	t.Helper()
	if err := unstructured.SetNestedField(u.Object, value, "spec", field); err != nil {
		t.Fatalf("setting spec.%s: %v", field, err)
	}
}

// theReadyMessage matches the message of obj's Ready condition, which must be about obj's
// generation.
func theReadyMessage(t *testing.T, obj *unstructured.Unstructured) types.GomegaMatcher {
	t.Helper()
	ready := readyCondition(conditionsOf(t, obj))
	if ready.ObservedGeneration != obj.GetGeneration() || ready.Message == "" {
		t.Fatalf("the Ready condition is not about generation %d: %+v", obj.GetGeneration(), ready)
	}
	return Equal(ready.Message)
}

// namesTheGeneration matches a message that names obj's generation.
func namesTheGeneration(_ *testing.T, obj *unstructured.Unstructured) types.GomegaMatcher {
	return ContainSubstring("generation %d", obj.GetGeneration())
}

func TestArgoCDHealth(t *testing.T) {
	ctx := context.Background()
	raw, err := os.ReadFile(argoCDHealthScript)
	if err != nil {
		t.Fatal(err)
	}
	script := string(raw)

	for _, tc := range []struct {
		name string
		// object drives a CoreDNS in ns into the state and returns it as the API server has it.
		object func(t *testing.T, ns string) *unstructured.Unstructured
		health string
		// kstatus is what kstatus (Flux's wait, kpt, cli-utils) computes from the same object,
		// as docs/bootstrap/contract.md lists it.
		kstatus status.Status
		// statusReady is status.ready on the same object.
		statusReady bool
		// message matches the message the script returns for obj.
		message func(t *testing.T, obj *unstructured.Unstructured) types.GomegaMatcher
	}{
		{
			name: "just created, no status yet",
			object: func(t *testing.T, ns string) *unstructured.Unstructured {
				content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(newCoreDNS(ns, newVersion))
				NewWithT(t).Expect(err).NotTo(HaveOccurred())
				u := &unstructured.Unstructured{Object: content}
				u.SetGroupVersionKind(addonsv1alpha1.GroupVersion.WithKind("CoreDNS"))
				// The answer to the create, before kaddons has written anything.
				NewWithT(t).Expect(k8sClient.Create(ctx, u)).To(Succeed())
				return u
			},
			health:      "Progressing",
			statusReady: false,
			// The CRD defaults status.observedGeneration to 0, which differs from the
			// generation: kstatus waits too.
			kstatus: status.InProgressStatus,
			message: namesTheGeneration,
		},
		{
			name: "applied, children rolling out",
			object: func(t *testing.T, ns string) *unstructured.Unstructured {
				cr := newCoreDNS(ns, newVersion)
				createCoreDNS(t, cr)
				waitReason(t, cr, addonsv1alpha1.ReasonChildrenNotReady)
				return coreDNSObject(t, cr)
			},
			health:      "Progressing",
			statusReady: false,
			kstatus:     status.InProgressStatus,
			message:     theReadyMessage,
		},
		{
			name: "ready",
			object: func(t *testing.T, ns string) *unstructured.Unstructured {
				cr := newCoreDNS(ns, newVersion)
				createReadyCoreDNS(t, cr)
				return coreDNSObject(t, cr)
			},
			health:      "Healthy",
			statusReady: true,
			kstatus:     status.CurrentStatus,
			message:     theReadyMessage,
		},
		{
			name: "spec changed, generation not observed yet",
			object: func(t *testing.T, ns string) *unstructured.Unstructured {
				cr := newCoreDNS(ns, newVersion)
				createReadyCoreDNS(t, cr)
				return updatedCoreDNSObject(t, cr, func(u *unstructured.Unstructured) { setSpec(t, u, int64(3), "replicas") })
			},
			health: "Progressing",
			// status.ready was written for the previous generation; only observedGeneration tells.
			statusReady: true,
			kstatus:     status.InProgressStatus,
			message:     namesTheGeneration,
		},
		{
			// kaddons writes both generations at once; an edited copy of a Ready object shows
			// that the script does not trust a Ready condition about an older generation.
			name: "Ready condition about an older generation (edited copy)",
			object: func(t *testing.T, ns string) *unstructured.Unstructured {
				cr := newCoreDNS(ns, newVersion)
				createReadyCoreDNS(t, cr)
				u := updatedCoreDNSObject(t, cr, func(u *unstructured.Unstructured) { setSpec(t, u, int64(3), "replicas") })
				NewWithT(t).Expect(unstructured.SetNestedField(u.Object, u.GetGeneration(), "status", "observedGeneration")).To(Succeed())
				return u
			},
			health:      "Progressing",
			statusReady: true,
			// kstatus reads status.observedGeneration only, never a condition's.
			kstatus: status.CurrentStatus,
			message: namesTheGeneration,
		},
		{
			name: "a version that does not exist: Stalled",
			object: func(t *testing.T, ns string) *unstructured.Unstructured {
				cr := newCoreDNS(ns, "9.9.9")
				NewWithT(t).Expect(k8sClient.Create(ctx, cr)).To(Succeed())
				waitReason(t, cr, addonsv1alpha1.ReasonVersionNotFound)
				return coreDNSObject(t, cr)
			},
			health:      "Degraded",
			statusReady: false,
			kstatus:     status.FailedStatus,
			message:     theReadyMessage,
		},
		{
			name: "a pinned downgrade: Stalled",
			object: func(t *testing.T, ns string) *unstructured.Unstructured {
				cr := newCoreDNS(ns, newVersion)
				createReadyCoreDNS(t, cr)
				updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) { c.Spec.Version = oldVersion })
				waitReason(t, cr, addonsv1alpha1.ReasonDowngradeRefused)
				return coreDNSObject(t, cr)
			},
			health:      "Degraded",
			statusReady: false,
			kstatus:     status.FailedStatus,
			message:     theReadyMessage,
		},
		{
			// It serves on the version it runs; the newer one waits in status.availableVersion.
			name: "an upgrade awaiting approval: Healthy",
			object: func(t *testing.T, ns string) *unstructured.Unstructured {
				cr := newCoreDNS(ns, oldVersion)
				createReadyCoreDNS(t, cr)
				updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) {
					c.Spec.Version = ""
					c.Spec.Upgrade = &addonsv1alpha1.UpgradeSpec{Approval: addonsv1alpha1.UpgradeApprovalManual}
				})
				waitReason(t, cr, addonsv1alpha1.ReasonUpgradeAwaitingApproval)
				NewWithT(t).Expect(cr.Status.AvailableVersion).To(Equal(newVersion))
				NewWithT(t).Expect(cr.Status.AppliedVersion).To(Equal(oldVersion))
				return coreDNSObject(t, cr)
			},
			health:      "Healthy",
			statusReady: true,
			kstatus:     status.CurrentStatus,
			message:     theReadyMessage,
		},
		{
			name: "an upgrade that failed with rollback disabled: Degraded",
			object: func(t *testing.T, ns string) *unstructured.Unstructured {
				cr := newCoreDNS(ns, oldVersion)
				cr.Spec.Upgrade = &addonsv1alpha1.UpgradeSpec{Timeout: &metav1.Duration{Duration: time.Second}, Rollback: ptr.To(false)}
				createReadyCoreDNS(t, cr)
				// Nothing plays the controller-manager for the new version's pods.
				updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) { c.Spec.Version = newVersion })
				waitReason(t, cr, addonsv1alpha1.ReasonUpgradeFailed)
				NewWithT(t).Expect(meta.IsStatusConditionTrue(cr.Status.Conditions, addonsv1alpha1.ConditionDegraded)).To(BeTrue())
				return coreDNSObject(t, cr)
			},
			health:      "Degraded",
			statusReady: false,
			// Without Stalled, kstatus sees only Ready=False: in progress until a wait times out.
			kstatus: status.InProgressStatus,
			message: theReadyMessage,
		},
		{
			// Ready on the version it rolled back to; Degraded keeps UpgradeFailed.
			name: "an upgrade that failed and rolled back: Ready again",
			object: func(t *testing.T, ns string) *unstructured.Unstructured {
				g := NewWithT(t)
				cr := newCoreDNS(ns, oldVersion)
				cr.Spec.Upgrade = &addonsv1alpha1.UpgradeSpec{Timeout: &metav1.Duration{Duration: time.Second}, Rollback: ptr.To(true)}
				createReadyCoreDNS(t, cr)
				updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) { c.Spec.Version = newVersion })
				g.Eventually(func(g Gomega) {
					getAddon(g, cr)
					g.Expect(cr.Status.Upgrade).NotTo(BeNil())
					g.Expect(cr.Status.Upgrade.FailedVersion).To(Equal(newVersion))
				}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())
				waitApplied(t, cr, oldVersion)
				markWorkloadsAvailable(t, ns)
				waitReason(t, cr, addonsv1alpha1.ReasonReconciled)
				degraded := meta.FindStatusCondition(cr.Status.Conditions, addonsv1alpha1.ConditionDegraded)
				g.Expect(degraded).NotTo(BeNil())
				g.Expect(degraded.Reason).To(Equal(addonsv1alpha1.ReasonUpgradeFailed))
				return coreDNSObject(t, cr)
			},
			health:      "Healthy",
			statusReady: true,
			kstatus:     status.CurrentStatus,
			message:     theReadyMessage,
		},
		{
			name: "waiting for a dependency that does not exist",
			object: func(t *testing.T, ns string) *unstructured.Unstructured {
				cr := newCoreDNS(ns, newVersion)
				cr.Spec.DependsOn = []addonsv1alpha1.AddonReference{{Kind: "CoreDNS", Name: "missing"}}
				NewWithT(t).Expect(k8sClient.Create(ctx, cr)).To(Succeed())
				waitReason(t, cr, addonsv1alpha1.ReasonDependencyNotReady)
				return coreDNSObject(t, cr)
			},
			health:      "Progressing",
			statusReady: false,
			kstatus:     status.InProgressStatus,
			message:     theReadyMessage,
		},
		{
			name: "spec.suspend just set",
			object: func(t *testing.T, ns string) *unstructured.Unstructured {
				cr := newCoreDNS(ns, newVersion)
				createReadyCoreDNS(t, cr)
				return updatedCoreDNSObject(t, cr, func(u *unstructured.Unstructured) { setSpec(t, u, true, "suspend") })
			},
			health: "Suspended",
			// Written before the pause, for the previous generation.
			statusReady: true,
			kstatus:     status.InProgressStatus,
			message: func(*testing.T, *unstructured.Unstructured) types.GomegaMatcher {
				return ContainSubstring("spec.suspend")
			},
		},
		{
			name: "spec.suspend: Paused",
			object: func(t *testing.T, ns string) *unstructured.Unstructured {
				cr := newCoreDNS(ns, newVersion)
				createReadyCoreDNS(t, cr)
				updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) { c.Spec.Suspend = true })
				waitReason(t, cr, addonsv1alpha1.ReasonPaused)
				return coreDNSObject(t, cr)
			},
			health:      "Suspended",
			statusReady: true,
			// Ready keeps its status while paused.
			kstatus: status.CurrentStatus,
			message: theReadyMessage,
		},
		{
			name: "the paused annotation: Paused",
			object: func(t *testing.T, ns string) *unstructured.Unstructured {
				cr := newCoreDNS(ns, newVersion)
				createReadyCoreDNS(t, cr)
				updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) {
					metav1.SetMetaDataAnnotation(&c.ObjectMeta, addonsv1alpha1.AnnotationPaused, "true")
				})
				waitReason(t, cr, addonsv1alpha1.ReasonPaused)
				return coreDNSObject(t, cr)
			},
			health:      "Suspended",
			statusReady: true,
			kstatus:     status.CurrentStatus,
			message:     theReadyMessage,
		},
		{
			name: "the kind paused by the operator configuration",
			object: func(t *testing.T, ns string) *unstructured.Unstructured {
				cr := newCoreDNS(ns, newVersion)
				createReadyCoreDNS(t, cr)
				withSettings(t, engine.Settings{PausedKinds: []string{"CoreDNS"}})
				updateCoreDNS(t, cr, func(c *addonsv1alpha1.CoreDNS) { c.Spec.Replicas = ptr.To[int32](3) })
				NewWithT(t).Eventually(func(g Gomega) {
					getAddon(g, cr)
					g.Expect(readyCondition(&cr.Status.AddonStatus).Reason).To(Equal(addonsv1alpha1.ReasonPaused))
					g.Expect(readyCondition(&cr.Status.AddonStatus).Message).To(ContainSubstring("is not applied"))
				}).WithTimeout(eventuallyTimeout).WithPolling(pollInterval).Should(Succeed())
				return coreDNSObject(t, cr)
			},
			health: "Suspended",
			// The change waits: Ready keeps the generation last applied, so neither
			// status.ready nor kstatus claims it, and the message names the generation.
			statusReady: false,
			kstatus:     status.InProgressStatus,
			message:     namesTheGeneration,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			obj := tc.object(t, newNamespace(t))

			health, message := argoCDHealth(t, script, obj)
			t.Logf("Argo CD: %s (%s)", health, message)
			g.Expect(argoCDHealthStatuses).To(ContainElement(health), "Argo CD would show Unknown")
			g.Expect(health).To(Equal(tc.health), "message: %s", message)
			g.Expect(message).To(tc.message(t, obj))

			statusReady, _, err := unstructured.NestedBool(obj.Object, "status", "ready")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(statusReady).To(Equal(tc.statusReady), "status.ready")

			res, err := status.Compute(obj)
			g.Expect(err).NotTo(HaveOccurred())
			t.Logf("kstatus: %s (%s)", res.Status, res.Message)
			g.Expect(res.Status).To(Equal(tc.kstatus), "kstatus: %s", res.Message)
		})
	}
}
