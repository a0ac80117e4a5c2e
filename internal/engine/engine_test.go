package engine

import (
	"context"
	"testing"
)

func TestPhaseOrder(t *testing.T) {
	r, _ := testReconciler(t, Options{})
	names := make([]string, 0, len(r.phases()))
	for _, p := range r.phases() {
		names = append(names, p.name)
	}
	want := []string{phaseGate, phaseResolve, phaseValidate, phasePermit, phasePreflight, phaseImpersonate, phaseDefault, phaseRender,
		phaseAdmit, phaseBeforeApply, phasePlan, phaseApply, phaseHealth}
	if !equalStrings(names, want) {
		t.Fatalf("phases = %v, want %v", names, want)
	}
	rendering := make([]string, 0, 3)
	for _, p := range phasesBetween(r.phases(), phaseResolve, phaseAdmit) {
		rendering = append(rendering, p.name)
	}
	if want := []string{phaseResolve, phaseValidate, phasePermit, phasePreflight, phaseImpersonate, phaseDefault, phaseRender,
		phaseAdmit}; !equalStrings(rendering, want) {
		t.Errorf("Render runs %v, want %v", rendering, want)
	}
	if got := phasesBetween(r.phases(), phaseRender, phaseResolve); got != nil {
		t.Errorf("phasesBetween in the wrong order = %v, want nil", got)
	}
}

func TestRenderStopsWhereTheReconcileWould(t *testing.T) {
	r, _ := testReconciler(t, Options{Permit: func(context.Context, PermitRequest) (string, error) {
		return "rule r forbids it", nil
	}})
	_, err := r.Render(context.Background(), coreDNS("a", "x"))
	if err == nil || err.Error() != "a/x cannot be rendered yet: rule r forbids it" {
		t.Errorf("Render of a refused add-on = %v, want the refusal", err)
	}
}
