package pulsarfake

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// The framing of the Pulsar binary protocol:
//
//	simple command:  [totalSize u32][commandSize u32][BaseCommand]
//	payload command: [totalSize u32][commandSize u32][BaseCommand]
//	                 [magic 0x0e01 u16][CRC32-C u32][metadataSize u32][MessageMetadata][payload]
//
// Sizes are big endian; totalSize counts everything after itself; the checksum
// covers everything after itself (metadata size, metadata and payload). A
// broker may put [0x0e02 u16][size u32][BrokerEntryMetadata] before the magic.
const (
	magicCRC32C         = 0x0e01
	magicBrokerMetadata = 0x0e02
	// maxFrameSize bounds a frame: Pulsar's 5 MiB message limit plus room for
	// the command and metadata.
	maxFrameSize = 5*1024*1024 + 10*1024
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errChecksum is returned for a payload whose CRC32-C does not match.
var errChecksum = errors.New("pulsarfake: checksum mismatch")

// frame is one decoded frame: the BaseCommand bytes and, for payload commands,
// the payload section starting at the magic number.
type frame struct {
	command []byte
	payload []byte
}

// readFrame reads one frame. buf is reused when large enough.
func readFrame(r io.Reader, buf []byte) (frame, []byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return frame{}, buf, err
	}
	total := binary.BigEndian.Uint32(hdr[:])
	if total < 4 || total > maxFrameSize {
		return frame{}, buf, fmt.Errorf("pulsarfake: frame size %d out of range", total)
	}
	if cap(buf) < int(total) {
		buf = make([]byte, total)
	}
	body := buf[:total]
	if _, err := io.ReadFull(r, body); err != nil {
		return frame{}, buf, err
	}
	cmdSize := binary.BigEndian.Uint32(body)
	if cmdSize > total-4 {
		return frame{}, buf, fmt.Errorf("pulsarfake: command size %d exceeds frame size %d", cmdSize, total)
	}
	f := frame{command: body[4 : 4+cmdSize]}
	if rest := body[4+cmdSize:]; len(rest) > 0 {
		f.payload = rest
	}
	return f, buf, nil
}

// appendFrame appends the encoding of a frame to dst. payload, when not nil,
// must be a complete payload section (see payloadSection).
func appendFrame(dst, command, payload []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(4+len(command)+len(payload)))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(command)))
	dst = append(dst, command...)
	return append(dst, payload...)
}

// payloadSection encodes [magic][CRC32-C][metadataSize][metadata][payload].
func payloadSection(metadata, payload []byte) []byte {
	out := make([]byte, 0, 10+len(metadata)+len(payload))
	out = binary.BigEndian.AppendUint16(out, magicCRC32C)
	out = append(out, 0, 0, 0, 0) // checksum, filled below
	out = binary.BigEndian.AppendUint32(out, uint32(len(metadata)))
	out = append(out, metadata...)
	out = append(out, payload...)
	binary.BigEndian.PutUint32(out[2:6], crc32.Checksum(out[6:], castagnoli))
	return out
}

// parsePayloadSection checks a payload section and splits it into metadata and
// payload. It returns the section itself from the magic number on (without any
// broker entry metadata), ready to be stored and delivered unchanged.
func parsePayloadSection(section []byte) (stored, metadata, payload []byte, err error) {
	if len(section) >= 6 && binary.BigEndian.Uint16(section) == magicBrokerMetadata {
		n := binary.BigEndian.Uint32(section[2:])
		if uint64(len(section)) < 6+uint64(n) {
			return nil, nil, nil, errors.New("pulsarfake: truncated broker entry metadata")
		}
		section = section[6+n:]
	}
	if len(section) < 10 {
		return nil, nil, nil, errors.New("pulsarfake: truncated payload section")
	}
	if m := binary.BigEndian.Uint16(section); m != magicCRC32C {
		return nil, nil, nil, fmt.Errorf("pulsarfake: bad magic number 0x%04x", m)
	}
	if want, got := binary.BigEndian.Uint32(section[2:]), crc32.Checksum(section[6:], castagnoli); want != got {
		return nil, nil, nil, fmt.Errorf("%w: frame says 0x%08x, computed 0x%08x", errChecksum, want, got)
	}
	n := binary.BigEndian.Uint32(section[6:])
	if uint64(len(section)) < 10+uint64(n) {
		return nil, nil, nil, errors.New("pulsarfake: metadata size exceeds frame")
	}
	return section, section[10 : 10+n], section[10+n:], nil
}
