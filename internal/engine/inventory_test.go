package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// configMaps returns n ConfigMap references in namespace a named prefix-<i>.
func configMaps(prefix string, n int) []addonsv1alpha1.ObjectReference {
	refs := make([]addonsv1alpha1.ObjectReference, 0, n)
	for i := range n {
		refs = append(refs, addonsv1alpha1.ObjectReference{Version: "v1", Kind: "ConfigMap", Namespace: "a", Name: fmt.Sprintf("%s-%05d", prefix, i)})
	}
	return refs
}

func TestRecordRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name       string
		objects    int
		compressed bool
		tooLarge   bool
	}{
		{name: "a usual package stays readable JSON", objects: 7},
		{name: "a big package is compressed", objects: 5000, compressed: true},
		{name: "the most objects an inventory holds fit", objects: addonsv1alpha1.MaxInventoryObjects, compressed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := inventoryRecord{ID: "42", Objects: addonsv1alpha1.NewInventory(configMaps("object-of-the-package", tc.objects))}
			value, err := encodeRecord(rec)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.HasPrefix(value, recordGzipPrefix); got != tc.compressed {
				t.Errorf("compressed = %v, want %v (%d bytes)", got, tc.compressed, len(value))
			}
			if len(value) > maxRecordBytes {
				t.Errorf("record takes %d bytes, over %d", len(value), maxRecordBytes)
			}
			got, err := decodeRecord(value)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, rec) {
				t.Errorf("decoded record differs: id %q, %d objects", got.ID, got.Objects.Len())
			}
		})
	}
}

func TestRecordTooLarge(t *testing.T) {
	// Names that do not compress: long and random.
	rnd := rand.New(rand.NewPCG(1, 2))
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	refs := make([]addonsv1alpha1.ObjectReference, 0, 8000)
	for range 8000 {
		name := make([]byte, 60)
		for i := range name {
			name[i] = alphabet[rnd.IntN(len(alphabet))]
		}
		refs = append(refs, addonsv1alpha1.ObjectReference{Version: "v1", Kind: "ConfigMap", Namespace: "a", Name: string(name)})
	}
	_, err := encodeRecord(inventoryRecord{ID: "1", Objects: addonsv1alpha1.NewInventory(refs)})
	if !errorIs[*inventoryTooLargeError](err) {
		t.Fatalf("encodeRecord = %v, want an inventoryTooLargeError", err)
	}
	if out := applyOutcome(err); out.reason != addonsv1alpha1.ReasonInventoryTooLarge || !out.terminal {
		t.Errorf("outcome = %+v, want terminal %s", out, addonsv1alpha1.ReasonInventoryTooLarge)
	}
}

func TestDecodeRecordRefusesGarbage(t *testing.T) {
	for _, value := range []string{"", "{}", "not json", recordGzipPrefix + "!!!", recordGzipPrefix + "aGVsbG8="} {
		if _, err := decodeRecord(value); err == nil {
			t.Errorf("decodeRecord(%q) succeeded", value)
		}
	}
}

func TestPendingObjects(t *testing.T) {
	kept, orphan := configMaps("kept", 1)[0], configMaps("orphan", 1)[0]
	record := func(id string, refs ...addonsv1alpha1.ObjectReference) string {
		value, err := encodeRecord(inventoryRecord{ID: id, Objects: addonsv1alpha1.NewInventory(refs)})
		if err != nil {
			t.Fatal(err)
		}
		return value
	}
	for _, tc := range []struct {
		name       string
		annotation string
		covered    string
		want       []addonsv1alpha1.ObjectReference
		wantID     string
	}{
		{name: "no record"},
		{name: "a record the inventory covers", annotation: record("7", kept, orphan), covered: "7"},
		{name: "an interrupted apply's record", annotation: record("7", kept, orphan), covered: "3",
			want: []addonsv1alpha1.ObjectReference{orphan}, wantID: "7"},
		{name: "an unreadable record", annotation: "{", covered: "3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addon := coreDNS("a", "x")
			if tc.annotation != "" {
				addon.Annotations = map[string]string{addonsv1alpha1.AnnotationInventoryRecord: tc.annotation}
			}
			addon.Status.Inventory = addonsv1alpha1.NewInventory([]addonsv1alpha1.ObjectReference{kept})
			addon.Status.InventoryRecord = tc.covered
			got, id := pendingObjects(context.Background(), addon)
			if !reflect.DeepEqual(got, tc.want) || id != tc.wantID {
				t.Errorf("pendingObjects = %v, %q; want %v, %q", got, id, tc.want, tc.wantID)
			}
			if all := InventoryObjects(context.Background(), addon); len(all) != 1+len(tc.want) {
				t.Errorf("InventoryObjects = %v, want the inventory and %v", all, tc.want)
			}
		})
	}
}

func TestWriteAhead(t *testing.T) {
	inventory, added, older := configMaps("in", 2), configMaps("new", 2), configMaps("older", 1)
	for _, tc := range []struct {
		name        string
		finalizers  []string
		pending     []addonsv1alpha1.ObjectReference
		desired     []addonsv1alpha1.ObjectReference
		wantPatches int
		wantRecord  []addonsv1alpha1.ObjectReference
	}{
		{name: "a new add-on: finalizer and record in one patch", finalizers: []string{"example.com/other"},
			desired: append(inventory, added...), wantPatches: 1, wantRecord: append(inventory, added...)},
		{name: "nothing new: no request", finalizers: []string{Finalizer}, desired: inventory},
		{name: "a lost finalizer alone", desired: inventory, wantPatches: 1},
		{name: "new objects join the pending ones", finalizers: []string{Finalizer}, pending: older,
			desired: append(inventory, added...), wantPatches: 1, wantRecord: append(older, added...)},
		{name: "pending objects are recorded already", finalizers: []string{Finalizer}, pending: added,
			desired: append(inventory, added...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addon := coreDNS("a", "x")
			addon.Finalizers = tc.finalizers
			r, c := testReconciler(t, Options{}, addon)
			patches := 0
			r.client = interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
				Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
					patches++
					return c.Patch(ctx, obj, p, opts...)
				},
			})
			ctx := context.Background()
			got := &addonsv1alpha1.CoreDNS{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(addon), got); err != nil {
				t.Fatal(err)
			}
			if tc.name != "a new add-on: finalizer and record in one patch" {
				got.Status.Inventory = addonsv1alpha1.NewInventory(inventory)
			}
			st := &reconcileState{addon: got, pending: tc.pending}
			if err := r.writeAhead(ctx, st, tc.desired); err != nil {
				t.Fatal(err)
			}
			if patches != tc.wantPatches {
				t.Errorf("patches = %d, want %d", patches, tc.wantPatches)
			}
			stored := &addonsv1alpha1.CoreDNS{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(addon), stored); err != nil {
				t.Fatal(err)
			}
			if want := append(slicesWithout(tc.finalizers, Finalizer), Finalizer); !equalStrings(stored.Finalizers, want) {
				t.Errorf("finalizers = %v, want %v", stored.Finalizers, want)
			}
			value, ok := stored.Annotations[addonsv1alpha1.AnnotationInventoryRecord]
			if tc.wantRecord == nil {
				if ok {
					t.Errorf("record written: %s", value)
				}
				return
			}
			rec, err := decodeRecord(value)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(rec.Objects.Objects(), tc.wantRecord) {
				t.Errorf("record = %v, want %v", rec.Objects.Objects(), tc.wantRecord)
			}
			if st.record != rec.ID || !reflect.DeepEqual(st.pending, tc.wantRecord) || got.ResourceVersion != stored.ResourceVersion {
				t.Errorf("state after the patch: record %q pending %v rv %s; want %q, %v, %s",
					st.record, st.pending, got.ResourceVersion, rec.ID, tc.wantRecord, stored.ResourceVersion)
			}
		})
	}
}

// slicesWithout returns s without v.
func slicesWithout(s []string, v string) []string {
	var out []string
	for _, x := range s {
		if x != v {
			out = append(out, x)
		}
	}
	return out
}

func TestCheckInventorySize(t *testing.T) {
	long := configMaps(strings.Repeat("n", 200), 5000)
	for _, tc := range []struct {
		name string
		refs []addonsv1alpha1.ObjectReference
		ok   bool
	}{
		{name: "5000 objects", refs: configMaps("cm", 5000), ok: true},
		{name: "more objects than the cap", refs: configMaps("cm", addonsv1alpha1.MaxInventoryObjects+1)},
		{name: "names too long for the byte cap", refs: long},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkInventorySize(tc.refs)
			if (err == nil) != tc.ok {
				t.Errorf("checkInventorySize = %v, want ok %v", err, tc.ok)
			}
			if err != nil && !strings.Contains(err.Error(), "nothing was applied") {
				t.Errorf("message %q does not say that nothing was applied", err)
			}
		})
	}
}
