// Subscribes @parcel/watcher (the file watcher VS Code uses) to a directory with its inotify
// backend and prints each event it reports as a JSON line: {"type":"create"|"update"|"delete",
// "path": relative to the directory}; prints `ready` once subscribed. Run by
// tests/fuse/test_watchers.rs: node parcel_watch.js DIR_WITH_NODE_MODULES WATCHED_DIR
const path = require('path');
const watcher = require(path.join(process.argv[2], 'node_modules', '@parcel', 'watcher'));
const dir = process.argv[3];

watcher
  .subscribe(
    dir,
    (err, events) => {
      if (err) {
        console.log(JSON.stringify({ type: 'error', path: String(err) }));
        return;
      }
      for (const e of events) {
        console.log(JSON.stringify({ type: e.type, path: path.relative(dir, e.path) }));
      }
    },
    { backend: 'inotify' },
  )
  .then(() => console.log('ready'))
  .catch((e) => {
    console.log(JSON.stringify({ type: 'error', path: String(e) }));
    process.exit(1);
  });
// Ends with the test's end of stdin (or a kill).
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
