"""What the matrix job checks before a tag's build: Pages, the environment, the release."""

from __future__ import annotations

from intelmac_torch_builder.ci import publish_check as check


def test_pages_must_deploy_from_actions() -> None:
    assert "not enabled" in str(check.pages_problem(None))
    assert "Source: GitHub Actions" in str(check.pages_problem({"build_type": "legacy"}))
    assert check.pages_problem({"build_type": "workflow"}) is None


def test_the_environment_must_let_the_tag_deploy() -> None:
    tag = "v2.14.1-1"
    assert check.environment_problem(None, [], tag) is None  # created on first deploy, open
    assert check.environment_problem({"deployment_branch_policy": None}, [], tag) is None
    protected = {"deployment_branch_policy": {"protected_branches": True,
                                              "custom_branch_policies": False}}
    assert "protected branches only" in str(check.environment_problem(protected, [], tag))
    custom = {"deployment_branch_policy": {"protected_branches": False,
                                           "custom_branch_policies": True}}
    branch_only = [{"name": "main", "type": "branch"}]
    problem = check.environment_problem(custom, branch_only, tag)
    assert problem is not None and "v* and release-*" in problem
    tags = [{"name": "main", "type": "branch"}, {"name": "v*", "type": "tag"}]
    assert check.environment_problem(custom, tags, tag) is None
    assert check.environment_problem(custom, tags, "release-20261122") is not None


def test_a_published_release_is_never_replaced() -> None:
    assert check.release_problem(None, "v2.14.1-1") is None
    assert check.release_problem({"isDraft": True}, "v2.14.1-1") is None
    problem = check.release_problem({"isDraft": False}, "v2.14.1-1")
    assert problem is not None and "Push v2.14.1-2" in problem
    assert "release-YYYYMMDD" in str(check.release_problem({"isDraft": False}, "release-20261122"))
