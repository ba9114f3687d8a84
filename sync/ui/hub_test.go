package ui

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// One rendering reaches every open page; a page that does not read holds
// nobody up and later gets only the newest rendering; the number of open
// pages is bounded.
func TestHubHandsTheNewestRenderingToEveryStream(t *testing.T) {
	h := newHub(100)
	var subs []chan struct{}
	for range 100 {
		c, ok, _ := h.subscribe()
		require.True(t, ok)
		subs = append(subs, c)
	}
	_, ok, closed := h.subscribe()
	assert.False(t, ok, "the 101st stream is refused")
	assert.False(t, closed)

	h.publish([]byte("one"))
	for _, c := range subs {
		require.Len(t, c, 1, "every stream is told once")
		<-c
	}
	h.publish([]byte("one"))
	for _, c := range subs {
		assert.Empty(t, c, "an unchanged rendering is not sent again")
	}
	for _, page := range []string{"two", "three", "four"} {
		h.publish([]byte(page))
	}
	v, html := h.current()
	assert.Equal(t, uint64(4), v)
	assert.Equal(t, "four", string(html))
	for _, c := range subs {
		assert.Len(t, c, 1, "a slow stream has one wake-up waiting, for the newest rendering")
	}

	h.unsubscribe(subs[0])
	_, ok, _ = h.subscribe()
	assert.True(t, ok, "a closed stream frees its place")
	h.close()
	<-subs[1] // the wake-up that was waiting
	_, open := <-subs[1]
	assert.False(t, open, "closing the hub ends every stream")
	_, ok, closed = h.subscribe()
	assert.False(t, ok)
	assert.True(t, closed, "a stream opened after is told the hub is closed, not full")
}
