//===- ExecTasks.cpp - divergent threads that wait on each other ----------===//
//
// Threads run in lockstep, which is exact until threads wait on each other:
// a producer warpgroup that waits for consumers to release a stage while
// the consumers wait for the producer's copies cannot both run to the end
// one after the other. On the GPU divergent warps run concurrently.
//
// Here the threads of a block form tasks. The block starts as one; a
// divergent scf.if (in a kernel that can block: mbarriers or setmaxnreg)
// runs its first branch and defers the second. When a task must wait (an
// mbarrier phase that has not completed, registers a setmaxnreg.inc cannot
// get yet, the end of a deferred branch it joins), the scheduler runs the
// first blocked task, in creation order, that may go on; if none may, it
// starts the innermost deferred branch of the newest blocked task as a new
// task; if there is none, every thread waits for another: a deadlock, and
// the error names each wait. Tasks run on their own stacks (std::thread),
// but one at a time, handing the block over only where one blocks or ends:
// a run is deterministic. A kernel that never blocks runs as before.
//
//===----------------------------------------------------------------------===//

#include "testing/simt/SimtInternals.h"

using namespace lossjit::simt;
using namespace lossjit::simt::detail;

void Executor::resetTasks() {
  assert(tasks.size() <= 1 && "tasks of the previous block still running");
  if (tasks.empty()) {
    tasks.push_back(std::make_unique<Task>());
    tasks[0]->arena.assign(size_t(prog.maxDepth + 2) * 2 * numThreads, 0);
  }
  Task &root = *tasks[0];
  root.arenaTop = 0;
  root.deferred.clear();
  root.blocked = root.done = false;
  root.ok = true;
  current = &root;
  aborted = false;
}

bool Executor::runnable(const Task &t) const {
  if (t.done || !t.blocked)
    return false;
  if (t.joining)
    return !t.joining->task || t.joining->task->done;
  // An aborted block unwinds: every wait gives up.
  return aborted || t.ready();
}

Executor::Task *Executor::pickNext() {
  for (auto &t : tasks)
    if (runnable(*t))
      return t.get();
  if (aborted)
    return nullptr;
  // Nothing may go on: start a branch a blocked task deferred.
  for (auto it = tasks.rbegin(); it != tasks.rend(); ++it) {
    Task &owner = **it;
    if (owner.done || !owner.blocked)
      continue;
    for (auto d = owner.deferred.rbegin(); d != owner.deferred.rend(); ++d) {
      if ((*d)->task)
        continue;
      Deferred &branch = **d;
      auto task = std::make_unique<Task>();
      Task *self = task.get();
      self->arena.assign(tasks[0]->arena.size(), 0);
      // Started blocked on nothing: it runs as soon as it gets the block.
      self->blocked = true;
      self->ready = [] { return true; };
      branch.task = self;
      tasks.push_back(std::move(task));
      self->thread = std::thread([this, self, &branch] {
        {
          std::unique_lock<std::mutex> lock(taskMutex);
          taskTurn.wait(lock, [&] { return current == self; });
        }
        self->blocked = false;
        self->ok = !aborted &&
                   exec(branch.range.begin, branch.range.end, branch.threads.data(),
                        uint32_t(branch.threads.size()));
        Task *next;
        {
          std::unique_lock<std::mutex> lock(taskMutex);
          self->done = true;
          if (!self->ok)
            aborted = true;
          next = pickNext();
          // The owner joins this task, so someone is always blocked on it.
          assert(next && "a finished task with nobody to run");
          current = next;
        }
        taskTurn.notify_all();
      });
      return self;
    }
  }
  // Every thread waits for another.
  std::string waits;
  for (auto &t : tasks)
    if (t->blocked && !t->done && !t->joining)
      waits += "\n  " + t->why();
  error = "deadlock: every thread of the block waits and nothing can end a wait, block " +
          blockText() + ":" + waits;
  aborted = true;
  for (auto &t : tasks)
    if (runnable(*t))
      return t.get();
  return nullptr;
}

void Executor::switchTo(Task *next) {
  Task *self = current;
  std::unique_lock<std::mutex> lock(taskMutex);
  current = next;
  taskTurn.notify_all();
  taskTurn.wait(lock, [&] { return current == self; });
}

bool Executor::blockUntil(const Instr &in, std::function<bool()> ready,
                          std::function<std::string()> why) {
  if (aborted)
    return false;
  if (ready())
    return true;
  Task *self = current;
  self->blocked = true;
  self->ready = std::move(ready);
  self->why = [why = std::move(why), this, &in] {
    return why() + ", at " + describeOp(in.op);
  };
  Task *next = pickNext();
  // The running task is the one blocked when it alone may go on again
  // (every other thread done).
  if (next && next != self)
    switchTo(next);
  self->blocked = false;
  self->ready = nullptr;
  return !aborted && next;
}

bool Executor::finishDeferred(Deferred &d) {
  if (!d.task)
    return aborted ? false
                   : exec(d.range.begin, d.range.end, d.threads.data(), uint32_t(d.threads.size()));
  Task *self = current;
  if (!d.task->done) {
    self->blocked = true;
    self->joining = &d;
    Task *next = pickNext();
    assert(next && next != self && "the deferred task is not done, so it can run");
    switchTo(next);
    self->blocked = false;
    self->joining = nullptr;
  }
  d.task->thread.join();
  const bool ok = d.task->ok;
  for (auto it = tasks.begin(); it != tasks.end(); ++it)
    if (it->get() == d.task) {
      tasks.erase(it);
      break;
    }
  d.task = nullptr;
  return ok && !aborted;
}
