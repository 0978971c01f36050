//go:build linux

package sqlite

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestOpenReadOnlyMount (issue 16 item 6): on a read-only mount, which
// root cannot write either, Open of an existing database and of a new one
// fails with ErrReadOnly, and the database is left as it was. A child
// process bind-mounts the directory read-only in a mount namespace of its
// own (so it needs root, or CAP_SYS_ADMIN; the test skips without).
func TestOpenReadOnlyMount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "m.db")
	s := openAt(t, path, Config{})
	putLine(t, s, "t", 2)
	closeChecked(t, s)
	before := fileBytes(t, path)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=romount", envDB+"="+path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		if strings.Contains(out.String(), "SKIP") || errors.Is(err, syscall.EPERM) {
			t.Skipf("no mount namespace here: %v %s", err, out.String())
		}
		t.Fatalf("child: %v\n%s", err, out.String())
	}
	t.Log(strings.TrimSpace(out.String()))
	if !bytes.Equal(before, fileBytes(t, path)) {
		t.Error("the database changed")
	}
	if got := dirNames(t, dir); len(got) != 1 {
		t.Errorf("the directory holds %v", got)
	}
}

// helperReadOnlyMount is the child of TestOpenReadOnlyMount, in a mount
// namespace of its own: it mounts the database's directory over itself
// read-only, and checks that Open of the database and of a new file
// beside it fail with ErrReadOnly.
func helperReadOnlyMount() error {
	path := os.Getenv(envDB)
	dir := filepath.Dir(path)
	if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
		fmt.Println("SKIP: bind mount:", err)
		return err
	}
	if err := syscall.Mount("", dir, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY, ""); err != nil {
		fmt.Println("SKIP: read-only remount:", err)
		return err
	}
	for _, p := range []string{path, filepath.Join(dir, "new.db")} {
		s, err := Open(p, Config{})
		if err == nil {
			s.Close()
			return fmt.Errorf("Open(%s) on a read-only mount succeeded", p)
		}
		if !errors.Is(err, ErrReadOnly) || !errors.Is(err, syscall.EROFS) {
			return fmt.Errorf("Open(%s): %v, want ErrReadOnly and EROFS", p, err)
		}
		fmt.Println("Open:", err)
	}
	return nil
}
