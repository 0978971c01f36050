//go:build !unix

package sqlite

import (
	"errors"
	"io/fs"
	"os"
)

// checkWrite returns the error that keeps this process from writing the
// file at path or, with create, from creating it in its directory; nil
// when nothing does. Here it opens the file read-write, or creates and
// removes it: on Windows a file's locks belong to the handle that took
// them, so opening and closing another handle leaves SQLite's alone.
func checkWrite(path string, create bool) error {
	if create {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		switch {
		case err == nil:
			f.Close()
			return os.Remove(path)
		case errors.Is(err, fs.ErrExist):
			return nil // a file appeared meanwhile: SQLite will say
		}
		return err
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0) // no O_CREATE, no O_TRUNC: changes nothing
	if err != nil {
		return err
	}
	return f.Close()
}

// checkSidecars returns nil here: probing whether the -wal and -shm files
// could be created would create them. When SQLite cannot write them, Open
// still fails with ErrReadOnly (see openErr).
func checkSidecars(path string) (sidecar string, err error) { return "", nil }
