package controllers

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// TestCreatingAnAddonCostsNineRequests counts the requests of a new 7-object CoreDNS
// until it settles: the finalizer and the write-ahead record share one patch, then 7
// create-only applies (no GET) and one status patch. The first apply records no event
// (the Ready event ends the install, and nothing runs the pods here).
func TestCreatingAnAddonCostsNineRequests(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	cr := newCoreDNS(ns, newVersion)
	mark, markAll, markApplied := requests.writeCount(), requests.count(), requests.applyCount()
	createCoreDNS(t, cr)
	waitQuiet(t, ns)
	// Reads count too: the ownership check of the new objects is their create-only apply,
	// not a GET each past the cache.
	all := requests.requestsSince(markAll, ns)
	g.Expect(all).To(HaveLen(9), "requests: %v", all)
	for _, r := range all {
		g.Expect(r).NotTo(HavePrefix("GET "), "requests: %v", all)
	}
	var writes, addonPatches []string
	requests.mu.Lock()
	for _, w := range requests.writes[mark:] {
		if !strings.Contains(w, ns) {
			continue
		}
		if strings.Contains(w, "/v1alpha1/namespaces/"+ns+"/coredns/") {
			addonPatches = append(addonPatches, w)
		}
		writes = append(writes, w)
	}
	requests.mu.Unlock()
	g.Expect(cr.Status.Inventory.Len()).To(Equal(7))
	g.Expect(writes).To(HaveLen(9), "writes: %v", writes)
	g.Expect(writes).NotTo(ContainElement(ContainSubstring("/events")), "writes: %v", writes)
	g.Expect(addonPatches).To(ConsistOf(
		"PATCH /apis/addons.kaddons.dev/v1alpha1/namespaces/"+ns+"/coredns/"+cr.Name,
		"PATCH /apis/addons.kaddons.dev/v1alpha1/namespaces/"+ns+"/coredns/"+cr.Name+"/status"),
		"one patch for the finalizer and the write-ahead record, one for the status")
	// The API server answers each apply with the object's metadata only: the engine reads
	// nothing else from it, and neither side encodes or decodes the whole object.
	applied := requests.appliedSince(markApplied, ns)
	g.Expect(applied).To(HaveLen(7), "applies: %v", applied)
	g.Expect(applied).To(HaveEach(HaveSuffix(" PartialObjectMetadata")), "applies: %v", applied)
}
