"""A small driver of confluent-kafka (librdkafka) for offsetgate's end-to-end tests.

    client.py produce BOOTSTRAP TOPIC COUNT PREFIX
    client.py consume BOOTSTRAP TOPIC COUNT TIMEOUT_S [GROUP]

consume prints one line per record: partition offset leaderEpoch key value
"""
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition, OFFSET_BEGINNING


def produce(bootstrap, topic, count, prefix):
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    errors = []

    def done(err, _msg):
        if err is not None:
            errors.append(err)

    for i in range(count):
        p.produce(topic, key=f"{prefix}-k{i}", value=f"{prefix}-v{i}", on_delivery=done)
        p.poll(0)
    left = p.flush(30)
    if left or errors:
        sys.exit(f"produce failed: {left} undelivered, errors {errors[:3]}")
    print(f"produced {count}")


def consume(bootstrap, topic, count, timeout_s, group=None):
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group or "offsetgate-test-assign",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
    }
    c = Consumer(conf)
    if group:
        c.subscribe([topic])
    else:
        md = c.list_topics(topic, timeout=10)
        parts = md.topics[topic].partitions
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
    got = 0
    deadline = time.time() + timeout_s
    while got < count and time.time() < deadline:
        m = c.poll(0.2)
        if m is None:
            continue
        if m.error():
            sys.exit(f"consume error: {m.error()}")
        epoch = m.leader_epoch() if m.leader_epoch() is not None else -1
        print(m.partition(), m.offset(), epoch, m.key().decode(), m.value().decode())
        got += 1
        if group:
            c.commit(m, asynchronous=False)
    c.close()
    if got < count:
        sys.exit(f"consumed {got} of {count} before the timeout")


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "produce":
        produce(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    elif mode == "consume":
        consume(sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5]), sys.argv[6] if len(sys.argv) > 6 else None)
    else:
        sys.exit(f"unknown mode {mode}")
