//go:build !unix

package sqlite

import "os"

// fileID identifies a file: here, the os.FileInfo that os.SameFile
// compares.
type fileID struct{ fi os.FileInfo }

// idOf returns the identity of the open file f.
func idOf(f *os.File) (fileID, bool) {
	fi, err := f.Stat()
	return fileID{fi}, err == nil
}

// statID returns the identity and size of the file at path; ok is false
// when there is none.
func statID(path string) (id fileID, size int64, ok bool) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}, 0, false
	}
	return fileID{fi}, fi.Size(), true
}

// same reports whether a and b are one file.
func (a fileID) same(b fileID) bool { return a.fi != nil && b.fi != nil && os.SameFile(a.fi, b.fi) }

// unlinked reports false: link counts are not read here, and the path is
// compared at every commit instead.
func unlinked(f *os.File) bool { return false }

// walPathEvery is how many commits pass between comparisons of the -wal
// path with the kept file: every commit here.
const walPathEvery = 1
