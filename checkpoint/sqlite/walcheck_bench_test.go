package sqlite

import "testing"

// BenchmarkWALCheck is what the writer adds to each commit to watch the
// -wal (issue 15 item 5, issue 16 item 9): the comparison of the path with
// the file SQLite writes before COMMIT (checkWALInUse) and the read of the
// header's salts after it (walCommitted). Compare with BenchmarkPut and
// BenchmarkW1Linear's us/step.
func BenchmarkWALCheck(b *testing.B) {
	s := openTemp(b, Config{})
	putLine(b, s, "t", 2)
	b.ReportAllocs()
	for b.Loop() {
		if err := s.checkWALInUse(); err != nil {
			b.Fatal(err)
		}
		s.wal.walCommitted(false)
	}
}
