// The official A2A JavaScript SDK over HTTP+JSON against a running server:
//   node rest_client.mjs <base URL>
// Prints one JSON object: what each call answered. The agent must be
// examples.agents:countdown (text "N" counts down from N; "0.3 N" pauses).
import { ClientFactory, ClientFactoryOptions, RestTransportFactory } from "@a2a-js/sdk/client";
import { Role, StreamResponse, Task } from "@a2a-js/sdk";

const base = process.argv[2];
const factory = new ClientFactory(
  ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
    transports: [new RestTransportFactory()],
    preferredTransports: ["HTTP+JSON"],
  }),
);
const client = await factory.createFromUrl(base);
let counter = 0;
const message = (text) => ({
  messageId: `js-${process.pid}-${++counter}`,
  role: Role.ROLE_USER,
  parts: [{ content: { $case: "text", value: text } }],
});
const state = (task) => Task.toJSON(task).status.state;
const kinds = (events) =>
  events.map((event) => Object.keys(StreamResponse.toJSON(event)).join(","));
const report = { transport: client.transport.constructor.name, protocol: client.transport.protocolName };

const sent = await client.sendMessage({ message: message("2") });
report.send = { kind: sent.id ? "task" : "message", state: state(sent), id: sent.id };
const got = await client.getTask({ id: sent.id, historyLength: 1 });
report.get = { id: got.id, state: state(got), history: got.history.length };
const listed = await client.listTasks({ pageSize: 50 });
report.list = { ids: listed.tasks.map((task) => task.id), pageSize: listed.pageSize };

const running = await client.sendMessage({
  message: message("0.5 8"),
  configuration: { returnImmediately: true },
});
const canceled = await client.cancelTask({ id: running.id });
report.cancel = { id: canceled.id, state: state(canceled) };

const streamed = [];
for await (const event of client.sendMessageStream({ message: message("3") })) {
  streamed.push(event);
}
report.stream = {
  kinds: kinds(streamed),
  last: StreamResponse.toJSON(streamed.at(-1)),
};

const live = await client.sendMessage({
  message: message("0.3 4"),
  configuration: { returnImmediately: true },
});
const followed = [];
for await (const event of client.resubscribeTask({ id: live.id })) {
  followed.push(event);
}
report.subscribe = {
  id: live.id,
  kinds: kinds(followed),
  last: StreamResponse.toJSON(followed.at(-1)),
};

try {
  await client.getTask({ id: "no-such-task" });
  report.missing = { error: null };
} catch (error) {
  report.missing = { error: error.constructor.name, message: error.message };
}
console.log(JSON.stringify(report));
