package sqlite

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"io/fs"
	"os"
)

// The -wal file's format (https://www.sqlite.org/fileformat2.html, section
// 4): a 32-byte header, then frames of a 24-byte header and one page each.
// Open reads it itself, before SQLite sees it, because SQLite replays any
// WAL it finds beside a database into every read, and the connection that
// closes last copies it into the database file: a check made through
// SQLite would come after the damage.
const (
	walHeaderSize      = 32
	walFrameHeaderSize = 24
	walMagicLE         = 0x377f0682 // checksums over little-endian words
	walMagicBE         = 0x377f0683 // checksums over big-endian words
	walFormatVersion   = 3007000
	dbHeaderSize       = 100
	// Offsets in the database header (page 1), all big-endian.
	dbHeaderPageSize = 16 // 2 bytes; 1 means 65536
	dbHeaderAppID    = 68 // 4 bytes: PRAGMA application_id
)

// walContent is what SQLite would replay from a -wal file: the frames up
// to its last valid commit frame.
type walContent struct {
	exists bool // there is a -wal file
	// pageSize is the header's page size; 0 when the header is not valid
	// (SQLite then ignores the file and starts it over).
	pageSize int
	// frames is the number of frames SQLite would replay (0: none).
	frames int
	// page1 is the start (dbHeaderSize bytes) of the newest page 1 among
	// those frames; nil when none of them holds page 1.
	page1 []byte
}

// walChecksum continues SQLite's WAL checksum (s0, s1) over b, read as
// 32-bit words in the given byte order; len(b) is a multiple of 8.
func walChecksum(order binary.ByteOrder, s0, s1 uint32, b []byte) (uint32, uint32) {
	for i := 0; i+8 <= len(b); i += 8 {
		s0 += order.Uint32(b[i:]) + s1
		s1 += order.Uint32(b[i+4:]) + s0
	}
	return s0, s1
}

// validPageSize reports whether n is a page size SQLite can use.
func validPageSize(n int) bool { return n >= 512 && n <= 65536 && n&(n-1) == 0 }

// readWAL reads the -wal file at path as SQLite's recovery does: a valid
// header, then frames whose salts match the header's and whose cumulative
// checksums verify, up to the last commit frame; the rest is ignored. A
// missing or empty file, or one whose header is not valid, holds nothing
// to replay. Only errors reading the file are returned.
func readWAL(path string) (walContent, error) {
	var w walContent
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return w, nil
	}
	if err != nil {
		return w, err
	}
	defer f.Close()
	w.exists = true
	r := bufio.NewReaderSize(f, 64<<10)
	hdr := make([]byte, walHeaderSize)
	if _, err := io.ReadFull(r, hdr); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return w, nil
		}
		return w, err
	}
	var order binary.ByteOrder
	switch binary.BigEndian.Uint32(hdr) {
	case walMagicLE:
		order = binary.LittleEndian
	case walMagicBE:
		order = binary.BigEndian
	default:
		return w, nil
	}
	pageSize := int(binary.BigEndian.Uint32(hdr[8:]))
	if binary.BigEndian.Uint32(hdr[4:]) != walFormatVersion || !validPageSize(pageSize) {
		return w, nil
	}
	s0, s1 := walChecksum(order, 0, 0, hdr[:24])
	if s0 != binary.BigEndian.Uint32(hdr[24:]) || s1 != binary.BigEndian.Uint32(hdr[28:]) {
		return w, nil
	}
	w.pageSize = pageSize
	salt := hdr[16:24]
	frame := make([]byte, walFrameHeaderSize+pageSize)
	var page1 []byte // the newest page 1 so far, committed or not
	for n := 1; ; n++ {
		if _, err := io.ReadFull(r, frame); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return w, nil
			}
			return w, err
		}
		fh, page := frame[:walFrameHeaderSize], frame[walFrameHeaderSize:]
		pgno := binary.BigEndian.Uint32(fh)
		if pgno == 0 || string(fh[8:16]) != string(salt) {
			return w, nil
		}
		s0, s1 = walChecksum(order, s0, s1, fh[:8])
		s0, s1 = walChecksum(order, s0, s1, page)
		if s0 != binary.BigEndian.Uint32(fh[16:]) || s1 != binary.BigEndian.Uint32(fh[20:]) {
			return w, nil
		}
		if pgno == 1 {
			page1 = append(page1[:0], page[:dbHeaderSize]...)
		}
		if binary.BigEndian.Uint32(fh[4:]) != 0 { // a commit frame
			w.frames = n
			if page1 != nil {
				w.page1 = append([]byte(nil), page1...)
			}
		}
	}
}

// dbHeader is what the tests read of a database header.
type dbHeader struct {
	pageSize int
	appID    uint32
}

// parseDBHeader reads the header at the start of page 1; ok is false when
// b is too short or does not start with SQLite's magic string.
func parseDBHeader(b []byte) (h dbHeader, ok bool) {
	const magic = "SQLite format 3\x00"
	if len(b) < dbHeaderSize || string(b[:len(magic)]) != magic {
		return h, false
	}
	h.pageSize = int(binary.BigEndian.Uint16(b[dbHeaderPageSize:]))
	if h.pageSize == 1 {
		h.pageSize = 65536
	}
	h.appID = binary.BigEndian.Uint32(b[dbHeaderAppID:])
	return h, true
}
