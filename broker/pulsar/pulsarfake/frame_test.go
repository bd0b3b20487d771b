package pulsarfake

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
)

func TestCRC32CKnownVector(t *testing.T) {
	// The CRC-32C check value of "123456789" (RFC 3720, appendix B.4).
	if got := crc32.Checksum([]byte("123456789"), castagnoli); got != 0xe3069283 {
		t.Fatalf("crc32c = 0x%08x, want 0xe3069283", got)
	}
}

func TestSimpleFrameRoundTrip(t *testing.T) {
	cmd := baseCommand(typePing, nil)
	wire := appendFrame(nil, cmd, nil)
	if got := binary.BigEndian.Uint32(wire); got != uint32(4+len(cmd)) {
		t.Fatalf("total size = %d, want %d", got, 4+len(cmd))
	}
	f, _, err := readFrame(bytes.NewReader(wire), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(f.command, cmd) || f.payload != nil {
		t.Fatalf("frame = %+v, want command %x and no payload", f, cmd)
	}
	fs, err := decode(f.command)
	if err != nil {
		t.Fatal(err)
	}
	if fs.u64(1) != typePing {
		t.Fatalf("type = %d, want PING", fs.u64(1))
	}
}

func TestPayloadFrameRoundTrip(t *testing.T) {
	meta := msg(nil).str(1, "producer").uint(2, 7).uint(3, 1700000000000).str(6, "key-1")
	payload := []byte{0x00, 0xff, 0xfe, 'a'}
	section := payloadSection(meta, payload)
	if m := binary.BigEndian.Uint16(section); m != 0x0e01 {
		t.Fatalf("magic = 0x%04x", m)
	}
	if want, got := crc32.Checksum(section[6:], castagnoli), binary.BigEndian.Uint32(section[2:]); want != got {
		t.Fatalf("checksum = 0x%08x, want 0x%08x over size+metadata+payload", got, want)
	}
	cmd := baseCommand(typeSend, msg(nil).uint(1, 3).uint(2, 7))
	var stream []byte
	stream = appendFrame(stream, cmd, section)
	stream = appendFrame(stream, baseCommand(typePong, nil), nil)

	r := bytes.NewReader(stream)
	f, buf, err := readFrame(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(f.command, cmd) {
		t.Fatalf("command = %x, want %x", f.command, cmd)
	}
	stored, gotMeta, gotPayload, err := parsePayloadSection(f.payload)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stored, section) || !bytes.Equal(gotMeta, meta) || !bytes.Equal(gotPayload, payload) {
		t.Fatalf("section split wrong: meta %x payload %x", gotMeta, gotPayload)
	}
	mf, err := decode(gotMeta)
	if err != nil {
		t.Fatal(err)
	}
	if mf.str(1) != "producer" || mf.u64(2) != 7 || mf.str(6) != "key-1" {
		t.Fatalf("metadata decoded wrong: %+v", mf)
	}
	// The next frame follows, and the read buffer is reused.
	f, _, err = readFrame(r, buf)
	if err != nil {
		t.Fatal(err)
	}
	if fs, _ := decode(f.command); fs.u64(1) != typePong {
		t.Fatalf("second frame type = %d, want PONG", fs.u64(1))
	}
}

func TestChecksumMismatch(t *testing.T) {
	section := payloadSection(msg(nil).str(1, "p"), []byte("payload"))
	for _, i := range []int{7, 12, len(section) - 1} { // metadata size, metadata, payload
		bad := bytes.Clone(section)
		bad[i] ^= 0x01
		if _, _, _, err := parsePayloadSection(bad); !errors.Is(err, errChecksum) {
			t.Errorf("corrupted byte %d: err = %v, want checksum mismatch", i, err)
		}
	}
	bad := bytes.Clone(section)
	bad[0] = 0x0f
	if _, _, _, err := parsePayloadSection(bad); err == nil {
		t.Error("bad magic accepted")
	}
	if _, _, _, err := parsePayloadSection(section[:8]); err == nil {
		t.Error("truncated section accepted")
	}
}

func TestBrokerEntryMetadataSkipped(t *testing.T) {
	section := payloadSection(msg(nil).str(1, "p"), []byte("x"))
	entryMeta := msg(nil).uint(1, 42)
	var prefixed []byte
	prefixed = binary.BigEndian.AppendUint16(prefixed, 0x0e02)
	prefixed = binary.BigEndian.AppendUint32(prefixed, uint32(len(entryMeta)))
	prefixed = append(prefixed, entryMeta...)
	prefixed = append(prefixed, section...)
	stored, _, payload, err := parsePayloadSection(prefixed)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stored, section) || string(payload) != "x" {
		t.Fatalf("stored %x payload %q", stored, payload)
	}
}

func TestFrameSizeLimits(t *testing.T) {
	var huge []byte
	huge = binary.BigEndian.AppendUint32(huge, maxFrameSize+1)
	if _, _, err := readFrame(bytes.NewReader(huge), nil); err == nil {
		t.Error("oversized frame accepted")
	}
	var lying []byte
	lying = binary.BigEndian.AppendUint32(lying, 8)
	lying = binary.BigEndian.AppendUint32(lying, 100) // command larger than the frame
	lying = append(lying, 0, 0, 0, 0)
	if _, _, err := readFrame(bytes.NewReader(lying), nil); err == nil {
		t.Error("command size beyond the frame accepted")
	}
	short := appendFrame(nil, baseCommand(typePing, nil), nil)
	if _, _, err := readFrame(bytes.NewReader(short[:len(short)-1]), nil); err == nil {
		t.Error("truncated frame accepted")
	}
}

func TestProtoEncoding(t *testing.T) {
	// A negative int64 is encoded in ten bytes of two's complement, as protobuf does.
	m := msg(nil).int(3, -1).sub(1, messageIDData(5, 9)).str(2, "s").boolean(6, true)
	fs, err := decode(m)
	if err != nil {
		t.Fatal(err)
	}
	if got := int64(fs.u64(3)); got != -1 {
		t.Errorf("int64 field = %d, want -1", got)
	}
	id, err := decodeMessageID(fs.bytes(1))
	if err != nil {
		t.Fatal(err)
	}
	if id.ledger != 5 || id.entry != 9 || id.ackSet {
		t.Errorf("message id = %+v", id)
	}
	if fs.str(2) != "s" || !fs.boolean(6) {
		t.Errorf("fields = %+v", fs)
	}
	if _, err := decode([]byte{0x0a, 0x05, 0x01}); err == nil {
		t.Error("truncated length-delimited field accepted")
	}
}
