package ui

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// One rendering reaches every open page; a page that does not read holds
// nobody up and later gets only the newest rendering; the number of open
// pages is bounded.
func TestHubHandsTheNewestRenderingToEveryStream(t *testing.T) {
	h := newHub(100, 100)
	var subs []chan struct{}
	for range 100 {
		c, _, err := h.subscribe(fmt.Sprintf("10.0.0.%d", len(subs)))
		require.NoError(t, err)
		subs = append(subs, c)
	}
	_, closed, err := h.subscribe("10.0.1.1")
	assert.ErrorIs(t, err, errTooManyStreams, "the 101st stream is refused")
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
	h.unsubscribe(subs[0])
	_, _, err = h.subscribe("10.0.1.1")
	assert.NoError(t, err, "a closed stream frees its place (once)")
	_, _, err = h.subscribe("10.0.1.2")
	assert.ErrorIs(t, err, errTooManyStreams)
	h.close()
	<-subs[1] // the wake-up that was waiting
	_, open := <-subs[1]
	assert.False(t, open, "closing the hub ends every stream")
	_, closed, err = h.subscribe("10.0.1.3")
	assert.NoError(t, err)
	assert.True(t, closed, "a stream opened after is told the hub is closed, not full")
}

// One client's streams are bounded apart from the others': a client at
// its bound is refused while others still open theirs, and a stream it
// closes gives it its place back.
func TestHubBoundsTheStreamsOfOneClient(t *testing.T) {
	h := newHub(10, 3)
	var mine []chan struct{}
	for range 3 {
		c, _, err := h.subscribe("192.0.2.7")
		require.NoError(t, err)
		mine = append(mine, c)
	}
	_, _, err := h.subscribe("192.0.2.7")
	assert.ErrorIs(t, err, errTooManyFromClient)
	for range 3 {
		_, _, err := h.subscribe("192.0.2.8")
		assert.NoError(t, err, "another client opens its own")
	}
	h.unsubscribe(mine[0])
	_, _, err = h.subscribe("192.0.2.7")
	assert.NoError(t, err)
}
