"""Every conversation shape a run's stages send their models, built by the stages' own code.

``arenaforge config validate --render`` renders each with each model's chat template
(:mod:`arenaforge.pipeline.template_check`), so a template that refuses a shape fails before
the run, not hours into it. The conversations come from the stages' builders with a sample
instruction and answers (the judge's protocol, both orders and its second round; the test
writers' two requests; difficulty's rating and task question), so a stage that changes what it
sends changes what is checked. Magpie mining's pre-query prompt is built by
:func:`arenaforge.stages.instructions.pre_query.build_pre_query` in the check itself.

The repair stage builds its conversation inside its loop (no builder to call): its shape here
is the loop's (system, instruction, answer, feedback, then another answer and feedback), with
the stage's own system prompt and its :func:`~arenaforge.stages.verification.repair.feedback_text`.

A judged stage's protocol (difficulty, judge) is found through its config section
(``protocol_registry``, the ``JudgedSection`` contract), not by naming its module. The
conversation builders are named: they are the stages' own functions, which a ``StageSpec``
does not carry (it declares what a stage reads and writes, not what it sends), and the shapes
must be built by them for the check to follow the stages.
"""

from __future__ import annotations

from typing import Any

Conversation = list[dict[str, str]]
Shape = tuple[str, Conversation]

SAMPLE_INSTRUCTION = ("Write a Python function `add(a, b)` that returns the sum of two "
                      "integers.")
SAMPLE_ANSWERS = ("```python\ndef add(a, b):\n    return a + b\n```",
                  "Here it is:\n```python\ndef add(a, b):\n    return sum([a, b])\n```")
SAMPLE_REFERENCE = "def add(a, b):\n    return a + b\n"


def difficulty_shapes(section: Any) -> list[Shape]:
    """The difficulty judges' requests (the rating, and the task question when asked)."""
    protocol = section.protocol_registry[section.protocol]
    shapes = [("rating", protocol.conversation(SAMPLE_INSTRUCTION))]
    if protocol.asks_task and section.min_task_prob is not None:
        shapes.append(("task question", protocol.task_conversation(SAMPLE_INSTRUCTION)))
    return shapes


def answer_shapes(section: Any) -> list[Shape]:
    # named: the stage's own builder (see the module's docstring)
    from arenaforge.stages.arena.answer import build_conversation

    return [("answer", build_conversation(SAMPLE_INSTRUCTION, section.system_prompt))]


def _first_reply(protocol: Any, section: Any) -> Any:
    """A parsed first-round reply scoring 2, made by the protocol's own parser."""
    from arenaforge.pipeline.backends.base import Completion

    if protocol.needs == "next_token_logprobs":
        reading = {t: (0.0 if choice == "2" else -8.0)
                   for choice, texts in protocol.spellings.items() for t in texts}
        return protocol.parse((reading, None), section)
    return protocol.parse(Completion("Correct and idiomatic. [[2]]", "stop"), section)


def judge_shapes(section: Any) -> list[Shape]:
    """The judge protocol's requests in both orders, and its second round when it has one."""
    # named: a battle and the two-round protocols are the judge protocols' own types
    from arenaforge.stages.arena import protocols as jp

    protocol = section.protocol_registry[section.protocol]
    reference = SAMPLE_REFERENCE if section.reference_column else None
    battle = jp.Battle("0" * 64, SAMPLE_INSTRUCTION, "model-a", "model-b", *SAMPLE_ANSWERS,
                       reference)
    requests = protocol.requests([battle])
    shapes = [(f"first round {'/'.join(k[1:])}", conv) for k, conv in requests.items()]
    if isinstance(protocol, jp.SequentialScoring):
        replies = {key: _first_reply(protocol, section) for key in requests}
        shapes += [(f"second round, order {key[-1]}", conv)
                   for key, conv in protocol.followups([battle], replies).items()]
    return shapes


def tests_shapes(section: Any) -> list[Shape]:
    """The test writers' request and, with ``inputs_call: second_call``, the generator one."""
    # named: the stage's own builders and its parsed-tests types (see the module's docstring)
    from arenaforge.stages.verification.test_parsing import EntryPoint, ParsedTests
    from arenaforge.stages.verification.tests import build_conversation, inputs_conversation

    entry = EntryPoint("add", "def add(a, b)", 2)
    same_reply = section.augment and section.inputs_call == "same_reply"
    shapes = [("tests", build_conversation(SAMPLE_INSTRUCTION, entry, section.tests_per_author,
                                           section.inputs_per_author if same_reply else None))]
    if section.augment and section.inputs_call == "second_call":
        tests = ParsedTests(("assert add(1, 2) == 3",))
        shapes.append(("generate_inputs", inputs_conversation(
            SAMPLE_INSTRUCTION, entry, tests, section.inputs_per_author)))
    return shapes


def repair_shapes(section: Any) -> list[Shape]:
    """The repair loop's conversation after its first and its second feedback."""
    # named: the stage's system prompt and feedback text (it has no builder to call)
    from arenaforge.stages.common.prompt_templates import load_template
    from arenaforge.stages.verification.repair import feedback_text

    feedback = feedback_text(None, None, "no fenced code block in the reply")
    first = [{"role": "system", "content": load_template("repair_system.txt")},
             {"role": "user", "content": SAMPLE_INSTRUCTION},
             {"role": "assistant", "content": SAMPLE_ANSWERS[1]},
             {"role": "user", "content": feedback}]
    second = [*first, {"role": "assistant", "content": SAMPLE_ANSWERS[0]},
              {"role": "user", "content": feedback}]
    return [("round 1", first), ("round 2", second)]


# Stage name -> its chat shapes (mining's raw prompt is checked apart).
CHAT_SHAPES = {"difficulty": difficulty_shapes, "answer": answer_shapes, "judge": judge_shapes,
               "tests": tests_shapes, "repair": repair_shapes}


def reads_logprobs(section: Any) -> bool:
    """Whether the stage of config ``section`` reads next-token probabilities (its prompts are
    then rendered on the client even for a served model, whose server renders only chat): a
    judged section's protocol (``JudgedSection.protocol_registry``) says."""
    protocols = getattr(section, "protocol_registry", None)
    if protocols is None:  # a stage without protocols reads no probabilities
        return False
    return protocols[section.protocol].needs == "next_token_logprobs"


def stage_shapes(stage: str, section: Any) -> list[Shape]:
    """The chat conversations ``stage`` sends under its config ``section`` (none for stages
    that send no chat)."""
    build = CHAT_SHAPES.get(stage)
    return build(section) if build is not None else []
