//go:build !linux

package sqlite

import "errors"

// helperReadOnlyMount: mount namespaces are Linux's.
func helperReadOnlyMount() error { return errors.New("no mount namespaces here") }
