package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// File is a parsed GGUF header: metadata, tensor infos and where the tensor
// data starts.
type File struct {
	Version    uint32
	Metadata   []KV
	Tensors    []TensorInfo
	DataOffset int64 // absolute offset of the tensor data section
}

// Get returns the metadata value for key.
func (f *File) Get(key string) (any, bool) {
	for _, kv := range f.Metadata {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return nil, false
}

// Limits that keep a corrupt file from making the reader allocate wildly.
const (
	maxString  = 1 << 20
	maxArray   = 1 << 24
	maxEntries = 1 << 16
	maxDims    = 8
)

// Read parses the header of a GGUF file (v2 or v3) from r. Arrays of strings,
// float32 and int32 come back as []string, []float32 and []int32; other
// arrays as []any.
func Read(r io.Reader) (*File, error) {
	d := &dec{r: bufio.NewReader(r)}
	magic := d.bytes(4)
	if d.err == nil && string(magic) != Magic {
		return nil, fmt.Errorf("gguf: bad magic %q", magic)
	}
	f := &File{Version: d.u32()}
	if d.err == nil && f.Version != 2 && f.Version != 3 {
		return nil, fmt.Errorf("gguf: unsupported version %d", f.Version)
	}
	nt, nkv := d.u64(), d.u64()
	if d.err == nil && (nt > maxEntries || nkv > maxEntries) {
		return nil, fmt.Errorf("gguf: implausible counts: %d tensors, %d metadata entries", nt, nkv)
	}
	alignment := uint64(Alignment)
	for i := uint64(0); i < nkv && d.err == nil; i++ {
		key := d.str()
		v := d.value(d.u32(), 0)
		f.Metadata = append(f.Metadata, KV{Key: key, Value: v})
		if a, ok := v.(uint32); ok && key == "general.alignment" && a > 0 {
			alignment = uint64(a)
		}
	}
	for i := uint64(0); i < nt && d.err == nil; i++ {
		t := TensorInfo{Name: d.str()}
		nd := d.u32()
		if nd > maxDims {
			return nil, fmt.Errorf("gguf: tensor %q has %d dims", t.Name, nd)
		}
		for j := uint32(0); j < nd; j++ {
			t.Dims = append(t.Dims, d.u64())
		}
		t.Type, t.Offset = d.u32(), d.u64()
		f.Tensors = append(f.Tensors, t)
	}
	if d.err != nil {
		return nil, d.err
	}
	f.DataOffset = int64((uint64(d.n) + alignment - 1) / alignment * alignment)
	return f, nil
}

type dec struct {
	r   *bufio.Reader
	n   int64
	err error
}

func (d *dec) bytes(n int) []byte {
	if d.err != nil {
		return nil
	}
	b := make([]byte, n)
	m, err := io.ReadFull(d.r, b)
	d.n += int64(m)
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		d.err = fmt.Errorf("gguf: at byte %d: %w", d.n, err)
	}
	return b
}

func (d *dec) u8() uint8 {
	b := d.bytes(1)
	if d.err != nil {
		return 0
	}
	return b[0]
}

func (d *dec) u16() uint16 {
	b := d.bytes(2)
	if d.err != nil {
		return 0
	}
	return binary.LittleEndian.Uint16(b)
}

func (d *dec) u32() uint32 {
	b := d.bytes(4)
	if d.err != nil {
		return 0
	}
	return binary.LittleEndian.Uint32(b)
}

func (d *dec) u64() uint64 {
	b := d.bytes(8)
	if d.err != nil {
		return 0
	}
	return binary.LittleEndian.Uint64(b)
}

func (d *dec) str() string {
	n := d.u64()
	if d.err != nil {
		return ""
	}
	if n > maxString {
		d.err = fmt.Errorf("gguf: string of %d bytes", n)
		return ""
	}
	return string(d.bytes(int(n)))
}

func (d *dec) value(t uint32, depth int) any {
	if d.err != nil {
		return nil
	}
	switch t {
	case TypeUint8:
		return d.u8()
	case TypeInt8:
		return int8(d.u8())
	case TypeUint16:
		return d.u16()
	case TypeInt16:
		return int16(d.u16())
	case TypeUint32:
		return d.u32()
	case TypeInt32:
		return int32(d.u32())
	case TypeFloat32:
		return math.Float32frombits(d.u32())
	case TypeBool:
		return d.u8() != 0
	case TypeString:
		return d.str()
	case TypeUint64:
		return d.u64()
	case TypeInt64:
		return int64(d.u64())
	case TypeFloat64:
		return math.Float64frombits(d.u64())
	case TypeArray:
		if depth > 2 {
			d.err = errors.New("gguf: arrays nested too deep")
			return nil
		}
		et, n := d.u32(), d.u64()
		if d.err != nil {
			return nil
		}
		if n > maxArray {
			d.err = fmt.Errorf("gguf: array of %d elements", n)
			return nil
		}
		switch et {
		case TypeString:
			out := make([]string, 0, n)
			for i := uint64(0); i < n && d.err == nil; i++ {
				out = append(out, d.str())
			}
			return out
		case TypeFloat32:
			out := make([]float32, 0, n)
			for i := uint64(0); i < n && d.err == nil; i++ {
				out = append(out, math.Float32frombits(d.u32()))
			}
			return out
		case TypeInt32:
			out := make([]int32, 0, n)
			for i := uint64(0); i < n && d.err == nil; i++ {
				out = append(out, int32(d.u32()))
			}
			return out
		default:
			out := make([]any, 0, min(n, 1024))
			for i := uint64(0); i < n && d.err == nil; i++ {
				out = append(out, d.value(et, depth+1))
			}
			return out
		}
	default:
		d.err = fmt.Errorf("gguf: unknown metadata type %d", t)
		return nil
	}
}
