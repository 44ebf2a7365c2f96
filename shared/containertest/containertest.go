// Package containertest builds containers that use the records of the
// formats' later versions at a small size, so that the code reading them
// runs in a short test. A zip's sizes and offsets are 32 bits unless its
// zip64 records carry them (a file or an archive over 4 GiB, or more than
// 65,535 entries); a tar header's size is 11 octal digits unless a pax
// header carries it (a file over 8 GiB).
package containertest

import (
	"archive/tar"
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// ForcedZip64 is a zip of files (name → content) stored uncompressed, in
// which every size and offset is in zip64 records, as a zip past 4 GiB has
// them: each local and central header says 0xFFFFFFFF and carries its
// zip64 extra field, and the end of the archive is a zip64 end record, its
// locator, and an end record pointing to them.
func ForcedZip64(files map[string]string, names []string) []byte {
	var b []byte
	le := binary.LittleEndian
	type placed struct {
		name   string
		crc    uint32
		n      uint64
		offset uint64
	}
	var done []placed
	for _, name := range names {
		body := files[name]
		p := placed{name: name, crc: crc32.ChecksumIEEE([]byte(body)), n: uint64(len(body)), offset: uint64(len(b))}
		b = le.AppendUint32(b, 0x04034b50) // local file header
		b = le.AppendUint16(b, 45)         // version needed: zip64
		b = le.AppendUint16(b, 0)          // flags
		b = le.AppendUint16(b, 0)          // stored
		b = le.AppendUint32(b, 0)          // time, date
		b = le.AppendUint32(b, p.crc)
		b = le.AppendUint32(b, 0xFFFFFFFF) // sizes: in the extra field
		b = le.AppendUint32(b, 0xFFFFFFFF)
		b = le.AppendUint16(b, uint16(len(name)))
		b = le.AppendUint16(b, 20)
		b = append(b, name...)
		b = le.AppendUint16(b, 0x0001) // zip64 extra: uncompressed, compressed
		b = le.AppendUint16(b, 16)
		b = le.AppendUint64(b, p.n)
		b = le.AppendUint64(b, p.n)
		b = append(b, body...)
		done = append(done, p)
	}
	dir := uint64(len(b))
	for _, p := range done {
		b = le.AppendUint32(b, 0x02014b50) // central directory header
		b = le.AppendUint16(b, 3<<8|45)    // made by: Unix, zip64
		b = le.AppendUint16(b, 45)
		b = le.AppendUint16(b, 0)
		b = le.AppendUint16(b, 0)
		b = le.AppendUint32(b, 0)
		b = le.AppendUint32(b, p.crc)
		b = le.AppendUint32(b, 0xFFFFFFFF)
		b = le.AppendUint32(b, 0xFFFFFFFF)
		b = le.AppendUint16(b, uint16(len(p.name)))
		b = le.AppendUint16(b, 28)
		b = le.AppendUint16(b, 0) // comment
		b = le.AppendUint16(b, 0) // disk
		b = le.AppendUint16(b, 0) // internal attributes
		b = le.AppendUint32(b, 0o100644<<16)
		b = le.AppendUint32(b, 0xFFFFFFFF) // offset: in the extra field
		b = append(b, p.name...)
		b = le.AppendUint16(b, 0x0001) // zip64 extra: uncompressed, compressed, offset
		b = le.AppendUint16(b, 24)
		b = le.AppendUint64(b, p.n)
		b = le.AppendUint64(b, p.n)
		b = le.AppendUint64(b, p.offset)
	}
	dirSize := uint64(len(b)) - dir
	end64 := uint64(len(b))
	b = le.AppendUint32(b, 0x06064b50) // zip64 end of central directory record
	b = le.AppendUint64(b, 44)
	b = le.AppendUint16(b, 45)
	b = le.AppendUint16(b, 45)
	b = le.AppendUint32(b, 0)
	b = le.AppendUint32(b, 0)
	b = le.AppendUint64(b, uint64(len(done)))
	b = le.AppendUint64(b, uint64(len(done)))
	b = le.AppendUint64(b, dirSize)
	b = le.AppendUint64(b, dir)
	b = le.AppendUint32(b, 0x07064b50) // its locator
	b = le.AppendUint32(b, 0)
	b = le.AppendUint64(b, end64)
	b = le.AppendUint32(b, 1)
	b = le.AppendUint32(b, 0x06054b50) // end of central directory: see zip64
	b = le.AppendUint16(b, 0)
	b = le.AppendUint16(b, 0)
	b = le.AppendUint16(b, 0xFFFF)
	b = le.AppendUint16(b, 0xFFFF)
	b = le.AppendUint32(b, 0xFFFFFFFF)
	b = le.AppendUint32(b, 0xFFFFFFFF)
	b = le.AppendUint16(b, 0)
	return b
}

// PaxSizedTar is a tar of files (name → content) whose every header gives
// its size only in a pax extended header, as a tar with a file over 8 GiB
// has it: the ustar header's size field says 0.
func PaxSizedTar(files map[string]string, names []string) []byte {
	var b []byte
	header := func(name string, flag byte, size int) {
		h := make([]byte, 512)
		copy(h, name)
		copy(h[100:], "0000644\x00")
		copy(h[108:], "0000000\x00")
		copy(h[116:], "0000000\x00")
		copy(h[124:], fmt.Sprintf("%011o\x00", size))
		copy(h[136:], "00000000000\x00")
		h[156] = flag
		copy(h[257:], "ustar\x0000")
		copy(h[148:], "        ")
		sum := 0
		for _, c := range h {
			sum += int(c)
		}
		copy(h[148:], fmt.Sprintf("%06o\x00 ", sum))
		b = append(b, h...)
	}
	pad := func() {
		if n := len(b) % 512; n != 0 {
			b = append(b, make([]byte, 512-n)...)
		}
	}
	for _, name := range names {
		body := files[name]
		rec := paxRecord("size", fmt.Sprint(len(body)))
		header("PaxHeaders/"+name, tar.TypeXHeader, len(rec))
		b = append(b, rec...)
		pad()
		header(name, tar.TypeReg, 0)
		b = append(b, body...)
		pad()
	}
	return append(b, make([]byte, 1024)...)
}

// paxRecord is one record of a pax extended header: "<length> key=value\n",
// the length counting itself.
func paxRecord(key, value string) string {
	rest := " " + key + "=" + value + "\n"
	n := len(rest) + 1
	for len(fmt.Sprint(n))+len(rest) != n {
		n++
	}
	return fmt.Sprint(n) + rest
}
