package systemtest

import (
	"fmt"
	"os"
	"sort"
	"strings"
)

// EnvChild names the role a test binary plays when it is re-run as a
// child process of one of its own tests. A package's TestMain passes its
// roles to [RunChild] before anything else.
const EnvChild = "LOCKSTEP_CHILD"

// RunChild runs the role [EnvChild] names, if it is set, and exits the
// process with the role's status; it returns at once when the variable is
// unset (the binary runs its tests). A role the package does not know exits
// with status 2 and says which roles it has.
func RunChild(roles map[string]func() int) {
	role := os.Getenv(EnvChild)
	if role == "" {
		return
	}
	run, ok := roles[role]
	if !ok {
		known := make([]string, 0, len(roles))
		for r := range roles {
			known = append(known, r)
		}
		sort.Strings(known)
		fmt.Fprintf(os.Stderr, "%s=%q: this test binary has no such role (it has: %s)\n", EnvChild, role, strings.Join(known, ", "))
		os.Exit(2)
	}
	os.Exit(run())
}
