package mqtt

import (
	"context"
	"fmt"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"

	"github.com/msgx/msgx/broker/driver"
)

// DeadLetterGroup is the group whose session keeps a dead-letter topic's
// messages. MQTT stores nothing for a topic nobody subscribes to, so before a
// subscription sends its first dead letter the driver makes sure a persistent
// session of this group is subscribed to the dead-letter topic: that of the
// group's slot 0 on this instance (see ClientID). Listening to the dead-letter
// topic in this group, on the same instance id, reads what it kept.
const DeadLetterGroup = driver.DeadLetterGroup

// reasonNoSubscribers is the PUBACK reason code 0x10: accepted, but nobody
// subscribes, so the broker dropped it.
const reasonNoSubscribers = 0x10

// keepDeadLetters makes sure the dead-letter topic has a session keeping its
// messages. It connects as the DeadLetterGroup member of slot 0, subscribes
// (QoS 1) and disconnects, leaving the session to collect dead letters. When
// this instance already holds slot 0 (a reader of the dead letters is live),
// that reader's session keeps them.
func (d *Driver) keepDeadLetters(ctx context.Context, topic string) error {
	d.mu.Lock()
	kept := d.kept[topic]
	d.mu.Unlock()
	if kept {
		return nil
	}
	key := slotKey(d.opts.instance, topic, DeadLetterGroup)
	slot := d.opts.slots.acquire(key)
	defer d.opts.slots.release(key, slot)
	if slot == 0 {
		if err := d.subscribeKeeper(ctx, topic); err != nil {
			return err
		}
	}
	d.mu.Lock()
	d.kept[topic] = true
	d.mu.Unlock()
	return nil
}

func (d *Driver) subscribeKeeper(ctx context.Context, topic string) error {
	clientID := ClientID(d.opts.instance, topic, DeadLetterGroup, 0)
	cfg := d.clientConfig(clientID)
	cfg.CleanStartOnInitialConnection = false
	cfg.SessionExpiryInterval = uint32(min(d.opts.deadLetterExpiry/time.Second, 1<<32-2))
	cfg.OnConnectionDown = func() bool { return false }
	ctx, cancel := context.WithTimeout(ctx, d.opts.connectTimeout)
	defer cancel()
	cm, err := autopaho.NewConnection(ctx, cfg)
	if err != nil {
		return fmt.Errorf("mqtt: dead-letter session for %q: %w", topic, err)
	}
	defer func() {
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), d.opts.packetTimeout)
		defer dcancel()
		_ = cm.Disconnect(dctx)
	}()
	if err := cm.AwaitConnection(ctx); err != nil {
		return fmt.Errorf("mqtt: dead-letter session for %q: connect: %w", topic, err)
	}
	filter := "$share/" + DeadLetterGroup + "/" + topic
	sa, err := cm.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: 1}}})
	if err == nil && len(sa.Reasons) > 0 && sa.Reasons[0] >= 0x80 {
		err = fmt.Errorf("SUBACK reason code 0x%02x", sa.Reasons[0])
	}
	if err != nil {
		return fmt.Errorf("mqtt: dead-letter session for %q: subscribe %s: %w", topic, filter, err)
	}
	return nil
}
