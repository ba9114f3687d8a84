package githubapi

import "fmt"

// Replays: GitHub's "Redeliver" sends a delivery again with the same
// X-GitHub-Delivery GUID and body, and an attacker who saw one delivery
// (a proxy's log, a leaked request) can send it again as often as they
// like; the signature still verifies. A receiver must act on what GitHub's
// API says, never once per delivery.

// newDeliveryID makes a GUID no delivery had before.
func newDeliveryID() string {
	return fmt.Sprintf("00000000-0000-0000-0000-%012d", deliveries.Add(1))
}

// Identified returns the delivery with its GUID fixed: every Send of the
// result is the same delivery, the first an ordinary one and the rest
// replays.
func (d Delivery) Identified() Delivery {
	if d.ID == "" {
		d.ID = newDeliveryID()
	}
	return d
}
