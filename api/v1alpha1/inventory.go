package v1alpha1

import "encoding/json"

// Caps of status.inventory. etcd refuses a request above 1.5 MiB (its default
// --max-request-bytes), and an add-on also carries its spec, its annotations (up to 256 KiB,
// the write-ahead record included) and its conditions, so the inventory keeps to half of it.
const (
	// MaxInventoryObjects is the most objects one add-on's inventory holds.
	MaxInventoryObjects = 10000
	// MaxInventoryBytes is the most bytes the inventory may take as JSON.
	MaxInventoryBytes = 768 << 10
)

// Inventory is the compact form of a list of objects: one entry per API group, version,
// kind and namespace, with the names of its objects. Objects gives the flat view.
type Inventory []InventoryEntry

// NewInventory groups refs into an inventory. Entries keep the order in which their first
// object appears in refs (the apply order, for a rendered set), and so do the names
// within an entry; a reference listed twice is kept once.
func NewInventory(refs []ObjectReference) Inventory {
	if len(refs) == 0 {
		return nil
	}
	type group struct{ group, version, kind, namespace string }
	index := map[group]int{}
	seen := make(map[ObjectReference]bool, len(refs))
	var inv Inventory
	for _, ref := range refs {
		if seen[ref] {
			continue
		}
		seen[ref] = true
		key := group{ref.Group, ref.Version, ref.Kind, ref.Namespace}
		i, ok := index[key]
		if !ok {
			i = len(inv)
			index[key] = i
			inv = append(inv, InventoryEntry{Group: ref.Group, Version: ref.Version, Kind: ref.Kind, Namespace: ref.Namespace})
		}
		inv[i].Names = append(inv[i].Names, ref.Name)
	}
	return inv
}

// Objects returns the flat view: one reference per object, in the inventory's order.
func (inv Inventory) Objects() []ObjectReference {
	if len(inv) == 0 {
		return nil
	}
	out := make([]ObjectReference, 0, inv.Len())
	for _, e := range inv {
		ref := ObjectReference{Group: e.Group, Version: e.Version, Kind: e.Kind, Namespace: e.Namespace}
		if e.Name != "" {
			ref.Name = e.Name
			out = append(out, ref)
		}
		for _, name := range e.Names {
			ref.Name = name
			out = append(out, ref)
		}
	}
	return out
}

// Len returns how many objects the inventory lists.
func (inv Inventory) Len() int {
	n := 0
	for _, e := range inv {
		n += len(e.Names)
		if e.Name != "" {
			n++
		}
	}
	return n
}

// EncodedSize returns how many bytes the inventory takes as JSON, as it is stored.
func (inv Inventory) EncodedSize() int {
	data, err := json.Marshal(inv)
	if err != nil {
		return 0
	}
	return len(data)
}
