// Reading a body within the limit, in as few copies as its length allows.

package webhook

import (
	"errors"
	"io"
	"sync"
)

// chunk is the unit in which a body of unknown length is read. Chunks are
// pooled: an oversized body costs no copies on the way to the limit and
// leaves no garbage behind, so the heap stays near MaxConcurrent × MaxBody
// however many arrive.
const chunk = 64 << 10

var chunks = sync.Pool{New: func() any { return new([chunk]byte) }}

// readBody reads a body whose length is known (length >= 0, already checked
// against the limit) into one exact allocation, and one of unknown length
// in pooled chunks copied out once at the end.
func readBody(r io.Reader, length int64) ([]byte, error) {
	if length >= 0 {
		body := make([]byte, length)
		if _, err := io.ReadFull(r, body); err != nil {
			return nil, err
		}
		return body, nil
	}
	var read []*[chunk]byte
	defer func() {
		for _, c := range read {
			chunks.Put(c)
		}
	}()
	total := 0
	for {
		c := chunks.Get().(*[chunk]byte)
		read = append(read, c)
		n, err := io.ReadFull(r, c[:])
		total += n
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	body := make([]byte, 0, total)
	for _, c := range read {
		body = append(body, c[:min(chunk, total-len(body))]...)
	}
	return body, nil
}
