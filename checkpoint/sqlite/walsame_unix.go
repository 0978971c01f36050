//go:build unix

package sqlite

import (
	"os"
	"syscall"
)

// fileID identifies a file: its device and inode.
type fileID struct{ dev, ino uint64 }

// idOf returns the identity of the open file f.
func idOf(f *os.File) (fileID, bool) {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return fileID{}, false
	}
	return fileID{uint64(st.Dev), uint64(st.Ino)}, true //nolint:unconvert // Dev and Ino are not uint64 everywhere
}

// statID returns the identity and size of the file at path; ok is false
// when there is none (or it cannot be told). It allocates nothing: it
// runs before every commit.
func statID(path string) (id fileID, size int64, ok bool) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return fileID{}, 0, false
	}
	return fileID{uint64(st.Dev), uint64(st.Ino)}, st.Size, true //nolint:unconvert // as above
}

// same reports whether a and b are one file.
func (a fileID) same(b fileID) bool { return a == b }

// unlinked reports whether the open file f has no name left (deleted, or
// another file renamed over it): one fstat, cheaper than a stat of a
// path. A file moved to another name keeps its link: only statID sees
// that.
func unlinked(f *os.File) bool {
	var st syscall.Stat_t
	return syscall.Fstat(int(f.Fd()), &st) == nil && st.Nlink == 0
}

// walPathEvery is how many commits pass between comparisons of the -wal
// path with the kept file (statID); unlinked runs at every commit.
const walPathEvery = 8
