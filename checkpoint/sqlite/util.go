package sqlite

import (
	"fmt"
	"hash/crc32"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// castagnoli is the CRC-32C table. It is computed once and never changes.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// crcOf returns the CRC-32C of the parts, each followed by a NUL byte so
// that moving bytes from one part to the next changes the sum.
func crcOf(parts ...[]byte) int64 {
	var c uint32
	for _, p := range parts {
		c = crc32.Update(c, castagnoli, p)
		c = crc32.Update(c, castagnoli, sep)
	}
	return int64(c)
}

var sep = []byte{0}

// crcString is crcOf for strings without copying them more than once.
func crcString(parts ...string) int64 {
	var c uint32
	for _, p := range parts {
		c = crc32.Update(c, castagnoli, []byte(p))
		c = crc32.Update(c, castagnoli, sep)
	}
	return int64(c)
}

// timeLayout is RFC 3339 with a fixed nine-digit fraction, so that stored
// times sort as text in time order (time.RFC3339Nano trims zeros). It
// parses with time.RFC3339Nano.
const timeLayout = "2006-01-02T15:04:05.000000000Z07:00"

func formatTime(t time.Time) string { return t.UTC().Format(timeLayout) }

func parseTime(s string) (time.Time, error) { return time.Parse(time.RFC3339Nano, s) }

// nullable maps "" to SQL NULL.
func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func validThread(thread string) error {
	if thread == "" {
		return fmt.Errorf("%w: empty thread ID", checkpoint.ErrInvalid)
	}
	return nil
}
