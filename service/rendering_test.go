package service_test

import (
	"testing"

	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// TestRendersSameAs varies every field of a service port, its Service and its
// endpoints, one at a time (servicetest.Variants finds them by reflection, so
// a field added to one of these types is varied too): RendersSameAs must see
// each change, but for the fields servicetest.Unrendered lists as read by no
// renderer, which it must not see. The renderers' tests check the other half:
// that varying a listed field changes nothing they write.
func TestRendersSameAs(t *testing.T) {
	base, _ := st.VariantBase().Port(st.VariantPort)
	again, _ := st.VariantBase().Port(st.VariantPort)
	if !base.RendersSameAs(again) || !base.RendersSameAs(base) {
		t.Fatal("a port does not render the same as an equal port of another Snapshot")
	}
	variants := st.Variants()
	for _, v := range variants {
		same, back := base.RendersSameAs(v.Port), v.Port.RendersSameAs(base)
		switch {
		case same != back:
			t.Errorf("%s: RendersSameAs is not symmetric: %v one way, %v the other", v.Field, same, back)
		case same && !v.Unrendered:
			t.Errorf("%s: RendersSameAs does not see it change: compare it there, or, if no renderer reads it, "+
				"add it to servicetest.Unrendered with the reason", v.Field)
		case !same && v.Unrendered:
			t.Errorf("%s: RendersSameAs compares it, yet servicetest.Unrendered says no renderer reads it: "+
				"drop it from one of the two", v.Field)
		}
	}
	if len(variants) < 30 {
		t.Errorf("%d variants: the walk over Port, Service and Endpoint missed fields", len(variants))
	}
	for _, v := range variants {
		t.Logf("%-38s unrendered: %v", v.Field, v.Unrendered)
	}
}
