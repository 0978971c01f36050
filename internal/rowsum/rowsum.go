package rowsum

import (
	"encoding/binary"
	"hash/crc32"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Field markers: what follows each one.
const (
	markBytes byte = 'b' // a length, then the bytes
	markNull  byte = 'n' // nothing: a NULL
	markInt   byte = 'i' // eight bytes, big-endian two's complement
)

// Sum is a checksum being computed. Add the fields in the row's order, then
// read Value. Methods return the Sum so that calls chain.
type Sum struct {
	crc uint32
	ok  bool
}

// New starts the checksum of a row of the table and rule named by domain.
func New(domain string) Sum {
	var s Sum
	s.ok = true
	return s.String(domain)
}

func (s Sum) write(b []byte) Sum {
	s.crc = crc32.Update(s.crc, castagnoli, b)
	return s
}

// Bytes adds a field holding b (empty is not NULL).
func (s Sum) Bytes(b []byte) Sum {
	var head [1 + binary.MaxVarintLen64]byte
	head[0] = markBytes
	n := binary.PutUvarint(head[1:], uint64(len(b)))
	return s.write(head[:1+n]).write(b)
}

// String adds a field holding str (empty is not NULL).
func (s Sum) String(str string) Sum {
	var head [1 + binary.MaxVarintLen64]byte
	head[0] = markBytes
	n := binary.PutUvarint(head[1:], uint64(len(str)))
	s = s.write(head[:1+n])
	// crc32.Update takes a []byte; copy in chunks to avoid one large
	// allocation for a long string.
	var buf [256]byte
	for len(str) > 0 {
		k := copy(buf[:], str)
		s = s.write(buf[:k])
		str = str[k:]
	}
	return s
}

// Int adds an integer field.
func (s Sum) Int(v int64) Sum {
	var b [9]byte
	b[0] = markInt
	binary.BigEndian.PutUint64(b[1:], uint64(v))
	return s.write(b[:])
}

// Null adds a NULL field.
func (s Sum) Null() Sum { return s.write([]byte{markNull}) }

// NullString adds str, or NULL when valid is false.
func (s Sum) NullString(str string, valid bool) Sum {
	if !valid {
		return s.Null()
	}
	return s.String(str)
}

// NullInt adds v, or NULL when valid is false.
func (s Sum) NullInt(v int64, valid bool) Sum {
	if !valid {
		return s.Null()
	}
	return s.Int(v)
}

// Value returns the checksum, as the non-negative int64 a store keeps in an
// INTEGER column. A Sum not started with New returns -1, which no started
// Sum returns, so a row checksummed by mistake with the zero Sum never
// verifies.
func (s Sum) Value() int64 {
	if !s.ok {
		return -1
	}
	return int64(s.crc)
}
