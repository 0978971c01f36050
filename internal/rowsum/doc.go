// Package rowsum computes the checksum a store keeps with each stored row,
// over the row's key and its values, so that a row that was damaged, or
// copied under another key, does not verify.
//
// A Sum is a CRC-32C (Castagnoli) over a domain name and the row's fields in
// a fixed order. Every field is written with its length before its bytes,
// and a NULL is written as its own marker, so that no two rows with
// different fields give the same input: ("a\x00", "b") and ("a", "\x00b"),
// "" and NULL, 1 and "1" all differ. The domain names the table and the
// version of the rule ("lockstep/approval/decision/v1"), so that a row
// copied into another table does not verify there either.
//
// The checksum detects accidents (a torn or flipped page, a bug, a row
// copied by hand) and is no defence against someone who edits a row and
// computes its checksum again: stores also decode every row strictly (see
// package strictjson) and check that its fields agree with one another.
//
// The package holds no state; a Sum is a value, not safe for concurrent
// use by several goroutines, and the zero Sum is not usable: start one
// with New.
package rowsum
