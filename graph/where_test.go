package graph

import "testing"

// TestWhereNamesTheValue pins the names encoding errors give a value: they
// are built only when encoding fails, from where's parts.
func TestWhereNamesTheValue(t *testing.T) {
	for _, tc := range []struct {
		w    where
		want string
	}{
		{where{prefix: "field", field: "Log"}, "field Log"},
		{where{prefix: "input field", field: "Log"}, "input field Log"},
		{where{prefix: "write of node", node: "n1", field: "Log"}, `write of node "n1" to field Log`},
		{where{prefix: "write of node", node: "a\"b\n", field: "Log"}, `write of node "a\"b\n" to field Log`},
		{where{prefix: `send 0 to "n" field`, field: "Log"}, `send 0 to "n" field Log`},
	} {
		if got := tc.w.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.w, got, tc.want)
		}
	}
}
