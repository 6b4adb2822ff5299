// Ctrl-C for collectives that no thread able to run the user's signal
// handlers waits on: a TF op's, whose caller is blocked inside TensorFlow
// (docs/reliability.md "How Ctrl-C works"). The core handles no signals: a
// binding's signal handler asks unattended_waits() (async-signal-safe) and,
// when some are pending, has another thread call interrupt_unattended_all().
#pragma once

namespace pytfcomm {

// Counts requests submitted with Communicator::submit_async (the engine's
// asynchronous ones) until they finish.
void note_unattended(int delta);
// How many are pending in this process. Async-signal-safe.
int unattended_waits();
// Interrupts every registered communicator (engine/registry.h) that has
// some (Communicator::interrupt_unattended); returns how many it interrupted.
int interrupt_unattended_all();

}  // namespace pytfcomm
