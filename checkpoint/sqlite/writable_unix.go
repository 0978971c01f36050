//go:build unix

package sqlite

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// access(2) modes (POSIX values).
const (
	accessW = 0x2
	accessX = 0x1
)

// checkWrite returns the error that keeps this process from writing the
// file at path or, with create, from creating it in its directory; nil
// when nothing does or when SQLite is better placed to say (a symlink
// already at a path to create: SQLite follows it).
//
// It asks access(2) and never opens the file: closing any descriptor of a
// file drops every POSIX lock this process holds on it, so opening and
// closing a database that another connection of this process has open
// (a second Open of the same path) would silently release that
// connection's SQLite locks, which lets another process delete the WAL it
// is using (https://www.sqlite.org/howtocorrupt.html, section 2.2). Nor
// does it create and remove a probe file, which a second process opening
// the same new path at that moment would take for its database.
func checkWrite(path string, create bool) error {
	target, mode := path, uint32(accessW)
	if create {
		if _, err := os.Lstat(path); err == nil {
			return nil
		}
		target, mode = filepath.Dir(path), accessW|accessX
	}
	if err := syscall.Access(target, mode); err != nil {
		return &fs.PathError{Op: "access", Path: target, Err: err}
	}
	return nil
}

// checkSidecars returns the error that keeps this process from writing the
// -wal and -shm files SQLite keeps beside the existing database at path:
// one that exists and may not be written (sidecar names it: "-wal" or
// "-shm"), or, for one that does not exist, a directory where it may not
// be created (sidecar is ""). Like checkWrite, it only asks access(2).
func checkSidecars(path string) (sidecar string, err error) {
	for _, sfx := range []string{"-wal", "-shm"} {
		_, err := os.Lstat(path + sfx)
		switch {
		case err == nil:
			if err := syscall.Access(path+sfx, accessW); err != nil {
				return sfx, &fs.PathError{Op: "access", Path: path + sfx, Err: err}
			}
		case errors.Is(err, fs.ErrNotExist):
			dir := filepath.Dir(path)
			if err := syscall.Access(dir, accessW|accessX); err != nil {
				return "", &fs.PathError{Op: "access", Path: dir, Err: err}
			}
		}
	}
	return "", nil
}
